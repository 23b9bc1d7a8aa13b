// Package flagargs parses a command's flags wherever they stand among its
// positional arguments, as `gvsctl why POD-A POD-B -json` and
// `gvs-master cert node n1 -out DIR` take them; the standard flag package
// stops at the first positional argument.
package flagargs

import "flag"

// Parse parses fs's flags before, between and after the positional
// arguments in args and returns the positional arguments in their order.
// A "--" makes the argument after it positional even if it looks like a
// flag. A request for help gives flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
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
