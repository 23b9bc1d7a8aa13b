// Package ipfix exports gvs's connections as IPFIX flow records (RFC
// 7011, the protocol OVS exports and flow collectors read), with the
// information elements of IANA's registry (RFC 7012) and a few of gvs's
// own under a Private Enterprise Number.
//
// A connection's way to a collector:
//
//  1. The tracker (package conntrack, Config.Accounting) counts each
//     connection's packets and bytes per direction under the entry lock
//     its packet takes anyway; nothing else happens per packet.
//  2. When a connection ends (it expires, closes, is flushed or evicted)
//     the tracker hands what it counted since its last report to
//     Exporter.OnEnd, which queues it without blocking or allocating,
//     or drops and counts it when the bounded queue is full.
//  3. Every Interval the exporter's goroutine (Run) walks the tracker
//     (Tracker.Flows) for connections idle for IdleTimeout and ones not
//     reported for ActiveTimeout.
//  4. Records turns each report into one data record per direction that
//     carried packets (biflowDirection says which), with the post-NAT
//     addresses when the connection is translated and, from Resolver,
//     the pods' names and their projects' VNIDs.
//  5. Message packs records into messages of at most MaxMessage bytes,
//     the templates first at start and every TemplateRefresh (RFC 7011
//     section 8.4), within MaxRate records a second; each message goes
//     to every collector over UDP.
//
// Decoder reads messages back, for gvs's own tests and fuzzing; the
// end-to-end test reads them with a collector gvs did not write
// (nfdump).
package ipfix
