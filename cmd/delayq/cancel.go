package main

import (
	"flag"
)

func cancelCommand() command {
	return command{name: "cancel", args: "ID... | -f FILE", summary: "cancel scheduled messages", run: runCancel,
		flags: func() *flag.FlagSet { fs, _ := cancelFlags(); return fs }}
}

func cancelFlags() (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	return fs, fs.String("f", "", "file of ids, one a line ('-' = stdin)")
}
