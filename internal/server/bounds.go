package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/xemahq/xema/internal/fault"
)

// DefaultBodyReadTimeout bounds reading one request's body when Server.BodyReadTimeout is 0.
const DefaultBodyReadTimeout = 20 * time.Second

// boundBody reads the whole request body before any route sees it: at most MaxBodyBytes
// (more is a typed 413) and within BodyReadTimeout (a body trickled byte by byte is a typed
// 408 and the connection is closed). The deadline is then lifted: the handler may
// legitimately wait for a slow provider (up to its timeoutMs) longer than the body may take.
// http.Server.ReadTimeout cannot do this: its deadline stays on the connection while the
// handler runs, and when it fires under the server's background read it cancels the
// request's context, cutting off a slow but legitimate invoke.
func (s *Server) boundBody(next http.Handler) http.Handler {
	timeout := s.BodyReadTimeout
	if timeout <= 0 {
		timeout = DefaultBodyReadTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > MaxBodyBytes {
			tooLarge(w)
			return
		}
		rc := http.NewResponseController(w)
		// Not every ResponseWriter supports deadlines (httptest's recorder does not); the
		// size bound holds regardless.
		deadlined := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
		body, err := readBody(r.Body, r.ContentLength)
		if deadlined && err == nil && len(body) <= MaxBodyBytes {
			_ = rc.SetReadDeadline(time.Time{})
		} else if deadlined {
			// Refused: the server must not wait for the rest of the body (it would try to
			// drain it for keep-alive); a deadline in the past makes it close the connection.
			_ = rc.SetReadDeadline(time.Unix(1, 0))
		}
		var ne net.Error
		switch {
		case err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusRequestTimeout, errorBody{Code: CodeRequestTimeout,
				Message: fmt.Sprintf("the request body was not received within %s", timeout)})
			return
		case err != nil:
			w.Header().Set("Connection", "close")
			sendAnswer(w, errorAnswer(fault.New(fault.Invalid, CodeBadRequest, "reading the body failed")))
			return
		case len(body) > MaxBodyBytes:
			tooLarge(w)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// readBody reads at most MaxBodyBytes+1 bytes of body. A declared length (at most
// MaxBodyBytes, checked before) sizes the buffer once, instead of io.ReadAll growing it from
// 512 bytes by copies; the spare byte lets the final EOF read, or a body longer than
// declared, land without a reallocation.
func readBody(body io.Reader, declared int64) ([]byte, error) {
	lr := io.LimitReader(body, MaxBodyBytes+1)
	if declared < 0 {
		return io.ReadAll(lr)
	}
	b := make([]byte, 0, declared+1)
	for {
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than declared: grow as io.ReadAll does
		}
	}
}

func tooLarge(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	sendAnswer(w, errorAnswer(fault.New(fault.TooLarge, CodeBodyTooLarge, "body exceeds %d bytes", MaxBodyBytes)))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// isBatch reports whether a JSON body is a JSON-RPC batch: its first non-space byte is '['.
func isBatch(body []byte) bool {
	t := bytes.TrimLeft(body, " \t\r\n")
	return len(t) > 0 && t[0] == '['
}

// refuseBatch answers a JSON-RPC batch with a JSON-RPC error object (MCP's streamable HTTP
// since 2025-06-18 has no batches; one body, one message keeps each call one audited,
// bounded unit of work).
func refuseBatch(w http.ResponseWriter) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32600, "message": "JSON-RPC batches are not supported: send one message per request"}})
}
