package audit

import (
	"bufio"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// ArchiveFormat names the archive's format in its manifest. Format 1 (archives written before
// it) covered its unchained lines by their count only; 2 chains them too (the end's
// unchainedHash), so an altered unchained line is a break.
const (
	ArchiveFormat   = "xema-audit-archive/2"
	archiveFormatV1 = "xema-audit-archive/1"
)

// An archive is gzip'd JSON Lines: first {"manifest": ...} naming each chain segment it holds
// (from the link before its first record to its last link, both authenticated under the
// chain's key), then one {"record": ...} a line (chained ones chain by chain in seq order,
// then unchained ones), then {"end": ...} with the counts, authenticated too. It is verified
// alone (VerifyArchive): an altered record is a hash mismatch, a removed one a gap, a
// truncated file a missing end, a segment dropped from the manifest a manifest MAC mismatch.
type archiveLine struct {
	Manifest *ArchiveManifest `json:"manifest,omitempty"`
	Record   *archiveRecord   `json:"record,omitempty"`
	End      *archiveEnd      `json:"end,omitempty"`
}

// ArchiveManifest describes an archive's content.
type ArchiveManifest struct {
	Format    string           `json:"format"`
	Before    time.Time        `json:"before"`
	CreatedAt time.Time        `json:"createdAt"`
	Chains    []ArchiveSegment `json:"chains"`
	// MAC covers the fields above under the current chain key at archiving time.
	MAC string `json:"mac"`
}

// ArchiveSegment is the part of one chain an archive holds: records FromSeq..ToSeq, the first
// linked after FromHash (the previous prune's last link, "" from the chain's start).
type ArchiveSegment struct {
	ChainID  string `json:"chainId"`
	FromSeq  int64  `json:"fromSeq"`
	FromHash string `json:"fromHash"`
	// FromMAC is the previous checkpoint's BaseMAC (empty when FromSeq is 1), so the start of
	// a segment cannot be cut off unnoticed.
	FromMAC string `json:"fromMac,omitempty"`
	ToSeq   int64  `json:"toSeq"`
	ToHash  string `json:"toHash"`
	ToMAC   string `json:"toMac"` // BaseMAC of the last link: the live log's new checkpoint
}

type archiveEnd struct {
	Records   int64 `json:"records"`
	Unchained int64 `json:"unchained"`
	// UnchainedHash links the unchained lines in their order as a chain of their own (format 2).
	UnchainedHash string `json:"unchainedHash,omitempty"`
	MAC           string `json:"mac"`
}

// archiveRecord is store.AuditRecord with its JSON documents as strings, byte for byte (an
// absent one omitted), so the link hash re-derives exactly.
type archiveRecord struct {
	ID             string    `json:"id"`
	Org            string    `json:"org"`
	Time           time.Time `json:"time"`
	Ref            string    `json:"ref"`
	SubjectKind    string    `json:"subjectKind"`
	SubjectRef     string    `json:"subjectRef"`
	Environment    string    `json:"environment"`
	Decision       string    `json:"decision"`
	Reasons        *string   `json:"reasons,omitempty"`
	Suggestions    *string   `json:"suggestions,omitempty"`
	Obligations    *string   `json:"obligations,omitempty"`
	BundleRevision string    `json:"bundleRevision"`
	InputHash      string    `json:"inputHash"`
	Runner         string    `json:"runner"`
	Outcome        string    `json:"outcome"`
	LatencyMicros  int64     `json:"latencyMicros"`
	ParentID       string    `json:"parentId"`
	Detail         *string   `json:"detail,omitempty"`
	PolicyInput    *string   `json:"policyInput,omitempty"`
	ChainID        string    `json:"chainId,omitempty"`
	ChainSeq       int64     `json:"chainSeq,omitempty"`
	ChainHash      string    `json:"chainHash,omitempty"`
}

func docString(b json.RawMessage) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

func docBytes(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

func toArchive(r store.AuditRecord) *archiveRecord {
	return &archiveRecord{ID: r.ID, Org: r.Org, Time: store.Stamp(r.Time), Ref: r.Ref, SubjectKind: r.SubjectKind,
		SubjectRef: r.SubjectRef, Environment: r.Environment, Decision: r.Decision, Reasons: docString(r.Reasons),
		Suggestions: docString(r.Suggestions), Obligations: docString(r.Obligations), BundleRevision: r.BundleRevision,
		InputHash: r.InputHash, Runner: r.Runner, Outcome: r.Outcome, LatencyMicros: r.LatencyMicros, ParentID: r.ParentID,
		Detail: docString(r.Detail), PolicyInput: docString(r.PolicyInput), ChainID: r.Chain.ChainID,
		ChainSeq: r.Chain.Seq, ChainHash: r.Chain.Hash}
}

func (a *archiveRecord) record() store.AuditRecord {
	return store.AuditRecord{ID: a.ID, Org: a.Org, Time: a.Time, Ref: a.Ref, SubjectKind: a.SubjectKind,
		SubjectRef: a.SubjectRef, Environment: a.Environment, Decision: a.Decision, Reasons: docBytes(a.Reasons),
		Suggestions: docBytes(a.Suggestions), Obligations: docBytes(a.Obligations), BundleRevision: a.BundleRevision,
		InputHash: a.InputHash, Runner: a.Runner, Outcome: a.Outcome, LatencyMicros: a.LatencyMicros, ParentID: a.ParentID,
		Detail: docBytes(a.Detail), PolicyInput: docBytes(a.PolicyInput),
		Chain: store.ChainLink{ChainID: a.ChainID, Seq: a.ChainSeq, Hash: a.ChainHash}}
}

// manifestMAC authenticates m (its MAC field aside) under key.
func manifestMAC(key []byte, m ArchiveManifest) string {
	m.MAC = ""
	b, _ := json.Marshal(m) // fields of fixed types: never fails
	return macHex(key, "xema-archive-manifest\x00", b)
}

func endMAC(key []byte, format, manifestMAC string, e archiveEnd) string {
	if format == archiveFormatV1 {
		return macHex(key, "xema-archive-end\x00", fmt.Appendf(nil, "%s\x00%d\x00%d", manifestMAC, e.Records, e.Unchained))
	}
	return macHex(key, "xema-archive-end\x00", fmt.Appendf(nil, "%s\x00%d\x00%d\x00%s", manifestMAC, e.Records, e.Unchained, e.UnchainedHash))
}

func macHex(key []byte, label string, b []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(label))
	mac.Write(b)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

// archiveWriter writes one archive.
type archiveWriter struct {
	gz   *gzip.Writer
	enc  *json.Encoder
	key  []byte
	umac hash.Hash // links the unchained lines (archiveEnd.UnchainedHash)
	m    ArchiveManifest
	end  archiveEnd
}

func newArchiveWriter(w io.Writer, key []byte, m ArchiveManifest) (*archiveWriter, error) {
	m.Format = ArchiveFormat
	m.MAC = manifestMAC(key, m)
	a := &archiveWriter{gz: gzip.NewWriter(w), key: key, umac: hmac.New(sha256.New, key), m: m}
	a.enc = json.NewEncoder(a.gz)
	a.enc.SetEscapeHTML(false)
	if err := a.enc.Encode(archiveLine{Manifest: &a.m}); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return a, nil
}

func (a *archiveWriter) add(r store.AuditRecord) error {
	a.end.Records++
	if r.Chain.ChainID == "" {
		a.end.Unchained++
		a.end.UnchainedHash = linkHash(a.umac, a.end.UnchainedHash, r)
	}
	if err := a.enc.Encode(archiveLine{Record: toArchive(r)}); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

func (a *archiveWriter) close() error {
	a.end.MAC = endMAC(a.key, a.m.Format, a.m.MAC, a.end)
	if err := a.enc.Encode(archiveLine{End: &a.end}); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := a.gz.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

// ArchiveResult is what VerifyArchive read.
type ArchiveResult struct {
	Manifest ArchiveManifest
	// UnchainedCounted: a format 1 archive, whose unchained lines are covered by their count
	// only (an altered one goes unnoticed).
	UnchainedCounted bool
	Records          int64
	Unchained        int64
	Breaks           []Break
	Verified         bool
}

// maxArchiveLine bounds one line of an archive (a record with its policy input).
const maxArchiveLine = 16 << 20

// ErrNotArchive: the file is not an audit archive (not gzip, no manifest first, not JSON).
var ErrNotArchive = errors.New("not an audit archive")

// VerifyArchive checks an archive by itself under the chain keys (current first, then
// retired ones): the manifest's MAC, each segment's checkpoints, every record's link, the
// segments complete, and the end's counts. Breaks name what does not hold; an error means
// the file could not be read as an archive at all.
func VerifyArchive(r io.Reader, keys [][]byte) (ArchiveResult, error) {
	var res ArchiveResult
	gz, err := gzip.NewReader(r)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrNotArchive, err)
	}
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 0, 64<<10), maxArchiveLine)
	next := func() (archiveLine, bool, error) {
		var l archiveLine
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return l, false, fmt.Errorf("%w: %w", ErrNotArchive, err)
			}
			return l, false, nil
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return l, false, fmt.Errorf("%w: a line is not JSON: %w", ErrNotArchive, err)
		}
		return l, true, nil
	}
	first, ok, err := next()
	if err != nil {
		return res, err
	}
	if !ok || first.Manifest == nil || (first.Manifest.Format != ArchiveFormat && first.Manifest.Format != archiveFormatV1) {
		return res, fmt.Errorf("%w: the first line is no %s manifest", ErrNotArchive, ArchiveFormat)
	}
	m := *first.Manifest
	res.Manifest = m
	res.UnchainedCounted = m.Format == archiveFormatV1
	brk := func(b Break) { res.Breaks = append(res.Breaks, b) }
	mk := -1
	for i, k := range keys {
		if hmac.Equal([]byte(manifestMAC(k, m)), []byte(m.MAC)) {
			mk = i
			break
		}
	}
	if mk < 0 {
		brk(Break{Problem: "the manifest does not verify under any chain key: altered, or not this deployment's"})
	}
	type segState struct {
		seg  ArchiveSegment
		mac  hash.Hash
		prev string
		want int64
		bad  bool
	}
	segs := map[string]*segState{}
	for _, s := range m.Chains {
		st := &segState{seg: s, prev: s.FromHash, want: s.FromSeq}
		k := -1
		for i, key := range keys {
			if hmac.Equal([]byte(BaseMAC(key, s.ChainID, s.ToSeq, s.ToHash)), []byte(s.ToMAC)) {
				k = i
				break
			}
		}
		switch {
		case k < 0:
			brk(Break{ChainID: s.ChainID, Seq: s.ToSeq, Problem: "the segment's last link does not verify under any chain key"})
			st.bad = true
		case s.FromSeq > 1 && !hmac.Equal([]byte(BaseMAC(keys[k], s.ChainID, s.FromSeq-1, s.FromHash)), []byte(s.FromMAC)):
			brk(Break{ChainID: s.ChainID, Seq: s.FromSeq, Problem: "the segment's start does not verify: records at its start were cut off"})
			st.bad = true
		case s.FromSeq < 1 || s.ToSeq < s.FromSeq || segs[s.ChainID] != nil:
			brk(Break{ChainID: s.ChainID, Problem: "the manifest's segment is malformed"})
			st.bad = true
		}
		if k >= 0 {
			st.mac = hmac.New(sha256.New, keys[k])
		}
		segs[s.ChainID] = st
	}
	var end *archiveEnd
	var umac hash.Hash
	unchainedHash := ""
	if mk >= 0 {
		umac = hmac.New(sha256.New, keys[mk])
	}
	for {
		l, ok, err := next()
		if err != nil {
			return res, err
		}
		if !ok {
			break
		}
		if end != nil {
			brk(Break{Problem: "lines after the archive's end"})
			break
		}
		if l.End != nil {
			end = l.End
			continue
		}
		if l.Record == nil {
			brk(Break{Problem: "a line that is neither a record nor the end"})
			continue
		}
		res.Records++
		r := l.Record.record()
		if r.Chain.ChainID == "" {
			res.Unchained++
			if umac != nil {
				unchainedHash = linkHash(umac, unchainedHash, r)
			}
			continue
		}
		st := segs[r.Chain.ChainID]
		if st == nil {
			brk(Break{ChainID: r.Chain.ChainID, Seq: r.Chain.Seq, RecordID: r.ID, Problem: "a record of a chain the manifest does not name: inserted"})
			continue
		}
		if st.bad {
			continue
		}
		switch {
		case r.Chain.Seq != st.want:
			brk(Break{ChainID: r.Chain.ChainID, Seq: st.want, RecordID: r.ID, Problem: fmt.Sprintf("expected seq %d, found %d: a record was removed or inserted", st.want, r.Chain.Seq)})
			st.bad = true
		case linkHash(st.mac, st.prev, r) != r.Chain.Hash:
			brk(Break{ChainID: r.Chain.ChainID, Seq: r.Chain.Seq, RecordID: r.ID, Problem: "hash mismatch: the record was altered (or its predecessor was)"})
			st.bad = true
		}
		st.prev, st.want = r.Chain.Hash, r.Chain.Seq+1
	}
	for _, s := range m.Chains {
		st := segs[s.ChainID]
		if !st.bad && (st.want-1 != s.ToSeq || st.prev != s.ToHash) {
			brk(Break{ChainID: s.ChainID, Seq: st.want, Problem: fmt.Sprintf("the segment ends at seq %d, the manifest at %d: records at its end were removed", st.want-1, s.ToSeq)})
		}
	}
	switch {
	case end == nil:
		brk(Break{Problem: "no end line: the archive is truncated"})
	case mk >= 0 && !hmac.Equal([]byte(endMAC(keys[mk], m.Format, m.MAC, *end)), []byte(end.MAC)):
		brk(Break{Problem: "the end line does not verify: altered"})
	case mk >= 0 && !res.UnchainedCounted && end.UnchainedHash != unchainedHash:
		brk(Break{Problem: "the unchained lines do not match the end's unchainedHash: one was altered, removed or added"})
	case end.Records != res.Records || end.Unchained != res.Unchained:
		brk(Break{Problem: fmt.Sprintf("the archive holds %d records (%d unchained), its end says %d (%d): records were removed or added",
			res.Records, res.Unchained, end.Records, end.Unchained)})
	}
	res.Verified = len(res.Breaks) == 0
	return res, nil
}
