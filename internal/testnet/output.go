package testnet

import (
	"bytes"
	"sync"
)

// Output collects a child process's stdout and stderr while the test reads them: Write may
// be called from the process's copying goroutines while the test calls Bytes or String.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// Bytes is a copy of what was written so far.
func (o *Output) Bytes() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.buf.Bytes())
}

// String is what was written so far.
func (o *Output) String() string { return string(o.Bytes()) }
