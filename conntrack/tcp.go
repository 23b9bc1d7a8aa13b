package conntrack

import "strconv"

// TCP tracking: OVS's conntrack-tcp, which follows pf's sequence tracking
// (Guido van Rooij, "Real Stateful TCP Packet Filtering in IP Filter").
// Each end records the highest sequence number it sent (seqlo), the
// highest the other end may send it (seqhi: acknowledged plus window) and
// its largest window; a segment must fall inside the window, acknowledge
// nothing the other end has not sent, and a reset must carry the exact
// sequence number.

// TCPState is the state of one end of a TCP connection, numbered as OVS's
// ct-dpif numbers them (CT_DPIF_TCPS_*). The tracker uses CLOSED,
// SYN_SENT, ESTABLISHED, CLOSING, FIN_WAIT_2 and TIME_WAIT, as OVS's
// userspace tracker does.
type TCPState uint8

// The TCP states.
const (
	TCPSClosed TCPState = iota
	TCPSListen
	TCPSSynSent
	TCPSSynRecv
	TCPSEstablished
	TCPSCloseWait
	TCPSFinWait1
	TCPSClosing
	TCPSLastAck
	TCPSFinWait2
	TCPSTimeWait
	numTCPStates
)

var tcpStateNames = [numTCPStates]string{
	"CLOSED", "LISTEN", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "CLOSE_WAIT",
	"FIN_WAIT_1", "CLOSING", "LAST_ACK", "FIN_WAIT_2", "TIME_WAIT",
}

// String returns the state's name as dpctl/dump-conntrack prints it.
func (s TCPState) String() string {
	if s < numTCPStates {
		return tcpStateNames[s]
	}
	return "[" + strconv.Itoa(int(s)) + "]"
}

// Window-scale bookkeeping in tcpPeer.wscale.
const (
	wsKnown      = 0x80 // the end sent the option
	wsUnknown    = 0x40 // picked up mid-stream: scale unknown, be liberal
	wsMask       = 0x0f
	tcpMaxWscale = 14
)

// maxAckWindow is how far an acknowledgement may stray (pf's fudge: one
// unscaled window plus 1500).
const maxAckWindow = 0xffff + 1500

// Results of a connection update (OVS's ct_update_res).
type update uint8

const (
	updInvalid  update = iota
	updValid           // +est
	updNew             // a closed TCP connection is being reopened: replace it
	updValidNew        // still +new (no reply yet, or a retransmitted SYN)
)

func seqGT(a, b uint32) bool  { return int32(a-b) > 0 }
func seqGEQ(a, b uint32) bool { return int32(a-b) >= 0 }

// tcpInvalidFlags reports impossible flag combinations (pf's
// pf_normalize_tcp checks, as OVS applies them).
func tcpInvalidFlags(f uint8) bool {
	if f&tcpSYN != 0 {
		if f&(tcpRST|tcpFIN) != 0 {
			return true
		}
	} else if f&(tcpACK|tcpRST) == 0 {
		return true
	}
	return f&tcpACK == 0 && f&(tcpFIN|tcpPSH|tcpURG) != 0
}

// tcpValidNew reports whether a TCP segment may create a connection: any
// sane segment but a SYN+ACK (OVS picks up connections mid-stream, like
// Linux with nf_conntrack_tcp_loose).
func tcpValidNew(f uint8) bool {
	return !tcpInvalidFlags(f) && f&(tcpSYN|tcpACK) != tcpSYN|tcpACK
}

// tcpNew sets up a new connection's TCP state from its first segment.
func tcpNew(e *entry, b []byte, p *pkt) {
	src, dst := &e.tcp[0], &e.tcp[1]
	*src, *dst = tcpPeer{}, tcpPeer{}
	src.seqlo = p.seq
	src.seqhi = p.seq + p.payload + 1
	if p.tcpFlags&tcpSYN != 0 {
		src.seqhi++
		src.wscale = tcpWscale(b[p.l4+20 : p.l4+p.tcpHdr])
	} else {
		src.wscale, dst.wscale = wsUnknown, wsUnknown
	}
	src.maxWin = max(p.win, 1)
	if sws := src.wscale & wsMask; sws != 0 {
		src.maxWin = uint16((uint32(src.maxWin) + 1<<sws - 1) >> sws)
	}
	if p.tcpFlags&tcpFIN != 0 {
		src.seqhi++
	}
	dst.seqhi, dst.maxWin = 1, 1
	src.state, dst.state = uint8(TCPSSynSent), uint8(TCPSClosed)
}

// tcpUpdate runs a segment of an existing connection through the window
// checks and state machine (OVS's tcp_conn_update). d is the sender's
// direction.
func (t *Tracker) tcpUpdate(e *entry, b []byte, p *pkt, d int, now Time) (update, Reason) {
	f := p.tcpFlags
	if tcpInvalidFlags(f) {
		return updInvalid, ReasonTCPFlags
	}
	src, dst := &e.tcp[d], &e.tcp[1-d]
	if f&(tcpSYN|tcpACK) == tcpSYN {
		if dst.state >= uint8(TCPSFinWait2) && src.state >= uint8(TCPSFinWait2) {
			src.state, dst.state = uint8(TCPSClosed), uint8(TCPSClosed)
			return updNew, ReasonNone
		}
		if src.state <= uint8(TCPSSynSent) {
			src.state = uint8(TCPSSynSent)
			t.setClass(e, TCPSynSent, now)
			return updValidNew, ReasonNone
		}
	}
	var sws, dws uint8
	if src.wscale&wsKnown != 0 && dst.wscale&wsKnown != 0 && f&tcpSYN == 0 {
		sws, dws = src.wscale&wsMask, dst.wscale&wsMask
	} else if src.wscale&wsUnknown != 0 && dst.wscale&wsUnknown != 0 && f&tcpSYN == 0 {
		sws, dws = tcpMaxWscale, tcpMaxWscale
	}
	win := p.win
	seq, ack := p.seq, p.ack
	origSeq := seq
	end := seq + p.payload
	if f&tcpSYN != 0 {
		end++
	}
	if f&tcpFIN != 0 {
		end++
	}
	checkAckskew := true
	if src.state < uint8(TCPSSynSent) {
		// The first segment from this end.
		if f&tcpSYN != 0 && dst.wscale&wsKnown != 0 {
			src.wscale = tcpWscale(b[p.l4+20 : p.l4+p.tcpHdr])
			if src.wscale&wsKnown != 0 {
				sws = src.wscale & wsMask
				win = uint16((uint32(win) + 1<<sws - 1) >> sws)
				dws = dst.wscale & wsMask
			} else {
				dst.maxWin <<= dst.wscale & wsMask // fix the other window up
				dst.wscale = 0                     // (a retransmitted SYN+ACK)
			}
		}
		src.seqlo = seq
		src.state = uint8(TCPSSynSent)
		// Slide the window if seqhi was set by a pick-up mid-stream.
		if w := max(1, uint32(dst.maxWin)<<dws); src.seqhi == 1 || seqGEQ(end+w, src.seqhi) {
			src.seqhi = end + w
			checkAckskew = false // a new or picked-up connection: lenient
		}
		if win > src.maxWin {
			src.maxWin = win
		}
	}
	if f&tcpACK == 0 {
		ack = dst.seqlo // no ACK: let it through the ack-skew check
	} else if ack == 0 && f&(tcpACK|tcpRST) == tcpACK|tcpRST {
		ack = dst.seqlo // broken stacks send RST+ACK with ack 0
	}
	if seq == end {
		seq, end = src.seqlo, src.seqlo // no data: ease the checks
	}
	ackskew := int64(0)
	if checkAckskew {
		ackskew = int64(int32(dst.seqlo - ack))
	}
	swin := uint32(win) << sws
	inWindow := seqGEQ(src.seqhi, end) && // last octet inside the other's window
		seqGEQ(seq, src.seqlo-uint32(dst.maxWin)<<dws) && // not more than a window back
		ackskew >= -maxAckWindow && // not acking more than a fragment back
		ackskew <= maxAckWindow<<sws && // not acking more than a window forward
		(f&tcpRST == 0 || origSeq == src.seqlo || origSeq == src.seqlo+1 || origSeq+1 == src.seqlo)
	if inWindow || !t.tcpWindow {
		t.tcpSlide(src, dst, win, end, ack, swin)
		if f&tcpSYN != 0 && src.state < uint8(TCPSSynSent) {
			src.state = uint8(TCPSSynSent)
		}
		if f&tcpFIN != 0 && src.state < uint8(TCPSClosing) {
			src.state = uint8(TCPSClosing)
		}
		if f&tcpACK != 0 {
			switch dst.state {
			case uint8(TCPSSynSent):
				dst.state = uint8(TCPSEstablished)
			case uint8(TCPSClosing):
				dst.state = uint8(TCPSFinWait2)
			}
		}
		if f&tcpRST != 0 {
			src.state, dst.state = uint8(TCPSTimeWait), uint8(TCPSTimeWait)
		}
		t.setClass(e, tcpClass(src.state, dst.state, f), now)
		return updValid, ReasonNone
	}
	// Outside the window, but within a window of slack around it when
	// the other end has not spoken yet or either end is closed: SYNs
	// shotgunned before a reply, a connection picked up after a flush,
	// stray segments after a close. Accepted without refreshing the
	// timeout, so that a flood of them cannot keep the entry alive.
	if (dst.state < uint8(TCPSSynSent) || dst.state >= uint8(TCPSFinWait2) || src.state >= uint8(TCPSFinWait2)) &&
		seqGEQ(src.seqhi+maxAckWindow, end) && seqGEQ(seq, src.seqlo-maxAckWindow) {
		t.tcpSlide(src, dst, win, end, ack, swin)
		if f&tcpFIN != 0 && src.state < uint8(TCPSClosing) {
			src.state = uint8(TCPSClosing)
		}
		if f&tcpRST != 0 {
			src.state, dst.state = uint8(TCPSTimeWait), uint8(TCPSTimeWait)
		}
		return updValid, ReasonNone
	}
	return updInvalid, ReasonTCPWindow
}

// tcpSlide records an accepted segment: the sender's largest window and
// highest sequence number, and how far the receiver may now send.
func (t *Tracker) tcpSlide(src, dst *tcpPeer, win uint16, end, ack, swin uint32) {
	if src.maxWin < win {
		src.maxWin = win
	}
	if seqGT(end, src.seqlo) {
		src.seqlo = end
	}
	if seqGEQ(ack+swin, dst.seqhi) {
		dst.seqhi = ack + max(swin, 1)
	}
}

// tcpClass maps the two ends' states to a timeout class, as OVS's
// tcp_conn_update picks its timeout (a reset takes Linux's short CLOSE
// timeout instead of TIME_WAIT's).
func tcpClass(src, dst uint8, f uint8) Class {
	switch {
	case src >= uint8(TCPSFinWait2) && dst >= uint8(TCPSFinWait2):
		if f&tcpRST != 0 {
			return TCPClose
		}
		return TCPTimeWait
	case src >= uint8(TCPSClosing) && dst >= uint8(TCPSClosing):
		return TCPLastAck
	case src < uint8(TCPSEstablished) || dst < uint8(TCPSEstablished):
		return TCPSynRecv
	case src >= uint8(TCPSClosing) || dst >= uint8(TCPSClosing):
		return TCPFinWait
	}
	return TCPEstablished
}

// setClass moves e to class c and restarts its timeout. The caller holds
// e.mu.
func (t *Tracker) setClass(e *entry, c Class, now Time) {
	if e.class != c {
		t.stats.byClass[e.class].Add(-1)
		t.stats.byClass[c].Add(1)
		e.class = c
	}
	e.expires = now + Time(t.timeouts[c])
}
