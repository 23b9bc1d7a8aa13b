package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/gvswitch/gvs/bench/compare"
)

// settingsFlag collects repeated -setting flags.
type settingsFlag []compare.Setting

func (f *settingsFlag) String() string {
	var names []string
	for _, s := range *f {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

func (f *settingsFlag) Set(v string) error {
	s, err := compare.ParseSetting(v)
	if err != nil {
		return err
	}
	*f = append(*f, s)
	return nil
}

// trialsCmd is `gvs-bench trials`.
func trialsCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("trials", flag.ContinueOnError)
	var settings settingsFlag
	fs.Var(&settings, "setting", `a gvs-switchd setting to compare, NAME or NAME={"field":"value",...} (docs/operations.md); give two or more, the first is the baseline`)
	trials := fs.Int("trials", 10, "clusters of each setting, in rotating order")
	dur := fs.Duration("t", 4*time.Second, "duration of each workload")
	prefix := fs.String("prefix", "gtr", "namespace prefix (at most 6 characters)")
	out := fs.String("o", "", "write the JSON report to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := labBinDir("trials")
	if err != nil {
		return err
	}
	rep, err := compare.RunTrials(ctx, compare.TrialsConfig{
		BinDir:   bin,
		Settings: settings,
		Trials:   *trials,
		Duration: *dur,
		Prefix:   *prefix,
		Progress: os.Stderr,
	})
	if rep == nil {
		return err
	}
	rep.Commit = gitCommit()
	// What was measured before a failure is still printed and written.
	return errors.Join(err, rep.WriteTable(os.Stdout), writeJSON(*out, rep))
}
