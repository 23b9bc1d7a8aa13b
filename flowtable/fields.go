package flowtable

// Fields is everything a rule can match on: the packet's header fields,
// parsed once (see Extract), and the pipeline's metadata (in_port, tunnel
// metadata, registers). It is a plain value with no pointers so that it can
// be masked, compared and used as a map key without allocating.
//
// For ARP, NwSrc/NwDst hold the sender/target protocol addresses and NwProto
// holds the low 8 bits of the ARP opcode, as in OpenFlow; ArpOp holds it whole.
type Fields struct {
	InPort  uint32
	Regs    [8]uint32
	TunID   uint64
	TunSrc  [4]byte
	TunDst  [4]byte
	EthSrc  [6]byte
	EthDst  [6]byte
	EthType uint16
	NwSrc   [4]byte
	NwDst   [4]byte
	NwProto uint8
	ArpOp   uint16
	ArpSha  [6]byte
	ArpTha  [6]byte
	TpSrc   uint16
	TpDst   uint16
}

// Special port numbers, as in OpenFlow.
const (
	PortNone   uint32 = 0          // no port
	PortInPort uint32 = 0xfffffff8 // OFPP_IN_PORT: send back out of in_port
	PortMax    uint32 = 0xffffff00 // ports above this are reserved
)

// MaxOutputs is the most outputs one pipeline run may produce; further output
// actions are ignored and counted as dropped (DropTooManyOutputs).
const MaxOutputs = 8

// MaxHits is the most rules one pipeline run records for counter attribution;
// a pipeline deeper than this stops (DropLoop).
const MaxHits = 32

// Output is one frame to send, produced by an output action.
//
// TunID and TunDst are meaningful only when the port is a tunnel port: they
// are the tunnel metadata at the time of the output action. EthDst is set
// when a set_field rewrote the Ethernet destination before the output.
type Output struct {
	Port      uint32
	TunID     uint64
	TunDst    [4]byte
	EthDst    [6]byte
	SetEthDst bool
}

// Verdict is the outcome of one pipeline run: the outputs to perform, or a
// drop with its reason, and the rules that were hit (for counters and the
// exact-match cache). A Verdict holds no pointers into the snapshot other than
// Hits, which stay valid as long as the snapshot that made them.
type Verdict struct {
	Outputs [MaxOutputs]Output
	NOut    int
	Drop    DropReason // DropNone when NOut > 0, unless outputs overflowed (DropTooManyOutputs)
	Table   uint8      // table where a drop happened
	Hits    [MaxHits]*Rule
	NHits   int
}

// DropReason says why a pipeline produced no output. The set is closed: the
// switch exports a counter per value.
type DropReason uint8

// The drop reasons of a pipeline run.
const (
	DropNone           DropReason = iota
	DropTableMiss                 // no rule matched in a table
	DropAction                    // a rule's actions ended without output (explicit drop)
	DropLoop                      // too many tables visited (resubmit loop)
	DropTooManyOutputs            // more than MaxOutputs outputs
	numPipelineDrops
)
