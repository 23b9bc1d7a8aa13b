package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/gvswitch/gvs/bench/compare"
)

// checkTargetsCmd is `gvs-bench check-targets REPORT.json`: docs/targets.md's
// ratios of gvs to the floor, to OVS and, on the -conntrack rows, to the
// kernel and to itself without rules in a compare report, and which are
// met. With -strict it fails when one is missed.
func checkTargetsCmd(args []string) error {
	strict := len(args) > 0 && args[0] == "-strict"
	if strict {
		args = args[1:]
	}
	if len(args) != 1 {
		return errors.New("usage: gvs-bench check-targets [-strict] REPORT.json")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var r compare.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	res := compare.CheckTargets(&r)
	if err := compare.WriteTargets(os.Stdout, res); err != nil {
		return err
	}
	for _, t := range res {
		if strict && t.Verdict != compare.Met {
			return fmt.Errorf("target %q (vs %s) %s", t.Name, t.Ref, t.Verdict)
		}
	}
	return nil
}
