package main

import (
	"encoding/json"
	"io"
)

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
