package main

import (
	"log"
	"log/slog"
)

// processLog is set by main alone: a command run by the process itself then
// sends the standard library's own log lines (net/http's transport, say)
// through its slog logger. Tests call run with it unset, and so change no
// process-wide logger.
var processLog bool

// routeStdLog sends the log package's default logger and slog's default
// through l's handler, at level WARN (they are the standard library's
// complaints: structured, and past the request log's rules, instead of bare
// lines on stderr), and returns what puts them back as they were.
func routeStdLog(l *slog.Logger) (restore func()) {
	prev, out, flags := slog.Default(), log.Writer(), log.Flags()
	prevLevel := slog.SetLogLoggerLevel(slog.LevelWarn)
	slog.SetDefault(l)
	return func() {
		slog.SetDefault(prev) // the default handler writes through log's output: restore that after
		log.SetOutput(out)
		log.SetFlags(flags)
		slog.SetLogLoggerLevel(prevLevel)
	}
}
