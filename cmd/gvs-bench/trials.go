package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
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
	if os.Geteuid() != 0 {
		return errors.New("trials needs root: it creates network namespaces")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rep, err := compare.RunTrials(ctx, compare.TrialsConfig{
		BinDir:   filepath.Dir(self),
		Settings: settings,
		Trials:   *trials,
		Duration: *dur,
		Prefix:   *prefix,
		Progress: os.Stderr,
	})
	if rep == nil {
		return err
	}
	if c, gerr := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); gerr == nil {
		rep.Commit = strings.TrimSpace(string(c))
	}
	if werr := rep.WriteTable(os.Stdout); werr != nil {
		return errors.Join(err, werr)
	}
	if *out != "" {
		b, jerr := json.MarshalIndent(rep, "", "  ")
		if jerr != nil {
			return errors.Join(err, jerr)
		}
		if werr := os.WriteFile(*out, append(b, '\n'), 0o644); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}
