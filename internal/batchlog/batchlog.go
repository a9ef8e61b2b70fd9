// Package batchlog writes log lines the way the store commits writes: one
// goroutine takes every line waiting and writes them with one system call.
// An idle server writes each line at once; a busy one makes one write for
// many requests' lines, not one each. A process that dies without closing it
// (killed with SIGKILL, or a crash) loses the lines not yet written, those of
// its last moments, never a payment: the database, not the log, is the
// record.
package batchlog

import (
	"io"
	"sync"
)

// MaxPending bounds the bytes waiting: past it (the output is stuck or
// slow) a Write waits for them to be written, so memory stays bounded.
const MaxPending = 1 << 20

// Writer is an io.Writer for log lines. Build it with New and Close it to
// write what is waiting.
type Writer struct {
	out io.Writer

	outMu sync.Mutex // held while a batch is written: batches keep their order
	spare []byte     // the last batch's buffer, for the next; under outMu

	mu      sync.Mutex
	pending []byte // lines waiting
	closed  bool

	wake chan struct{} // a token: lines are waiting
	stop chan struct{}
	done chan struct{}
}

// New starts the goroutine that writes to out.
func New(out io.Writer) *Writer {
	w := &Writer{out: out, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Write queues p, one log line (log/slog writes each line with one call).
// It returns at once, unless MaxPending bytes are waiting or w is closed:
// then it writes them itself.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.pending = append(w.pending, p...)
	now := w.closed || len(w.pending) >= MaxPending
	w.mu.Unlock()
	if now {
		return len(p), w.flush()
	}
	select {
	case w.wake <- struct{}{}:
	default: // the goroutine is already woken: it takes this line too
	}
	return len(p), nil
}

func (w *Writer) run() {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
			w.flush()
		case <-w.stop:
			return
		}
	}
}

// flush writes every line waiting, in one call.
func (w *Writer) flush() error {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.mu.Lock()
	batch := w.pending
	w.pending = w.spare[:0]
	w.mu.Unlock()
	w.spare = batch
	if len(batch) == 0 {
		return nil
	}
	_, err := w.out.Write(batch)
	return err
}

// Close writes what is waiting and stops the goroutine; a line written
// after it is written at once.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	return w.flush()
}
