package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Every record appended, from concurrent callers, is in the file when its append returns,
// once, each line chained to the one before under the key.
func TestJournalChainsEveryRecord(t *testing.T) {
	key := []byte("k")
	path := filepath.Join(t.TempDir(), "floor.journal")
	j, err := openJournal(path, key)
	if err != nil {
		t.Fatal(err)
	}
	defer j.f.Close()
	const calls = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*calls)
	for i := range calls {
		wg.Go(func() {
			id := fmt.Sprintf("inv_%02d", i)
			if err := j.append(decisionRecord(id, "hmac-sha256:00", time.Now())); err != nil {
				errs <- err
				return
			}
			// Written when append returned: the decision precedes the call it admits.
			if raw, err := os.ReadFile(path); err != nil || !bytes.Contains(raw, []byte(`{"id":"`+id+`"`)) {
				errs <- fmt.Errorf("decision %s not in the journal once appended (%v)", id, err)
			}
			if err := j.append(outcomeRecord(id, 200, time.Millisecond, time.Now())); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if len(lines) != 2*calls {
		t.Fatalf("%d lines, want %d", len(lines), 2*calls)
	}
	var prev []byte
	seen := map[string]bool{}
	for n, line := range lines {
		rec, link, ok := bytes.Cut(line, []byte("\t"))
		if !ok {
			t.Fatalf("line %d has no link: %s", n, line)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write(prev)
		mac.Write(rec)
		if want := hex.EncodeToString(mac.Sum(nil)); string(link) != want {
			t.Fatalf("line %d: link %s, want %s", n, link, want)
		}
		if seen[string(rec)] {
			t.Fatalf("line %d repeats a record", n)
		}
		seen[string(rec)], prev = true, link
	}
}
