// Package batchlog writes log lines the way the store commits writes: one
// goroutine takes every line waiting and writes them with one system call.
// A line waits at most a linger (New) for others to join it: a busy server
// makes one write, and one wake-up of that goroutine, for many requests'
// lines, and an idle one writes each line that long after it is logged. A
// process that dies without closing it (killed with SIGKILL, or a crash)
// loses the lines not yet written, those of its last moments, never a
// payment: the database, not the log, is the record.
package batchlog

import (
	"io"
	"sync"
	"time"
)

// MaxPending bounds the bytes waiting: past it (the output is stuck or
// slow) a Write waits for them to be written, so memory stays bounded.
const MaxPending = 1 << 20

// Writer is an io.Writer for log lines. Build it with New and Close it to
// write what is waiting.
type Writer struct {
	out    io.Writer
	linger time.Duration

	outMu sync.Mutex // held while a batch is written: batches keep their order
	spare []byte     // the last batch's buffer, for the next; under outMu

	mu      sync.Mutex
	pending []byte // lines waiting
	closed  bool

	wake chan struct{} // a token: lines are waiting
	stop chan struct{}
	done chan struct{}
}

// New starts the goroutine that writes to out. The first line of a batch
// waits linger for more to join it; 0 writes what is waiting at once.
func New(out io.Writer, linger time.Duration) *Writer {
	w := &Writer{out: out, linger: linger, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
	var linger *time.Timer
	if w.linger > 0 {
		linger = time.NewTimer(w.linger)
		linger.Stop()
	}
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			return
		}
		if linger != nil {
			linger.Reset(w.linger)
			select {
			case <-linger.C:
			case <-w.stop: // Close writes what is waiting
				return
			}
			select {
			case <-w.wake: // the lines it stands for go in this batch
			default:
			}
		}
		w.flush()
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
