package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// net/http's transport reports a server that answers on an idle
// connection with the log package: routed, the line is a structured WARN of
// the command's logger, not a bare line on stderr; restored, nothing of it
// is left.
func TestStdLogThroughSlog(t *testing.T) {
	var logs lockedBuffer
	out, flags := log.Writer(), log.Flags()
	restore := routeStdLog(slog.New(slog.NewJSONHandler(&logs, nil)))
	defer restore()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // one answer, then a second nobody asked for
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		time.Sleep(50 * time.Millisecond)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		time.Sleep(time.Second)
	}()
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	var line map[string]any
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "Unsolicited response received on idle HTTP channel") {
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("transport line %q is not the handler's JSON: %v", l, err)
				}
			}
		}
		if line != nil {
			break
		}
	}
	if line == nil || line["level"] != "WARN" {
		t.Errorf("transport line = %v, want a WARN line of the routed logger; logs:\n%s", line, logs.String())
	}

	restore()
	if log.Writer() != out || log.Flags() != flags {
		t.Errorf("log output and flags not restored")
	}
	log.SetOutput(io.Discard)
	log.Print("after restore")
	log.SetOutput(out)
	if strings.Contains(logs.String(), "after restore") {
		t.Errorf("a line after restore still reached the routed logger")
	}
}

// serve, run as the process's own command, sends the standard library's
// lines through its JSON log, and puts the process's loggers back when it
// stops.
func TestServeRoutesStdLog(t *testing.T) {
	processLog = true
	t.Cleanup(func() { processLog = false })
	out := log.Writer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "s.db")}, env(nil), io.Discard, pw)
		pw.Close()
	}()
	lines := make(chan string)
	go func() {
		for sc := bufio.NewScanner(pr); sc.Scan(); {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var found map[string]any
	for timeout := time.After(10 * time.Second); found == nil; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("serve stopped")
			}
			if strings.Contains(l, `"msg":"listening"`) {
				log.Print("a line of the standard library")
			}
			if strings.Contains(l, "a line of the standard library") {
				if err := json.Unmarshal([]byte(l), &found); err != nil {
					t.Fatalf("line %q is not JSON: %v", l, err)
				}
			}
		case <-timeout:
			t.Error("the standard library's line never reached serve's log")
			found = map[string]any{}
		}
	}
	cancel()
	go func() {
		for range lines {
		}
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if found["level"] != "WARN" {
		t.Errorf("the standard library's line = %v, want a WARN line of serve's JSON log", found)
	}
	if log.Writer() != out {
		t.Errorf("serve left the log package writing elsewhere")
	}
}
