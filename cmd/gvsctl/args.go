package main

import (
	"encoding/json"
	"flag"
	"io"
)

// parseInterleaved parses fs's flags wherever they stand among args (before,
// between or after the positional arguments) and returns the positional
// arguments in their order. A request for help gives flag.ErrHelp.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// printer returns a command's way of answering: v as indented JSON to out
// when asJSON, else whatever text prints.
func printer(out io.Writer, asJSON bool) func(v any, text func()) error {
	return func(v any, text func()) error {
		if asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}
		text()
		return nil
	}
}
