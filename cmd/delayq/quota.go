package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

func quotaCommand() command {
	return command{name: "quota", args: "[--json] | set SCOPE [--pending N] [--rate N] [--rules RULES] | delete SCOPE",
		summary: "teams' quotas: the most messages a scope may hold and enqueue a second", run: runQuota,
		flags: func() *flag.FlagSet { fs, _ := quotaFlags(); return fs }}
}

// quotaOpts are the flags of delayq quota.
type quotaOpts struct {
	asJSON           bool
	pending, rate    int64
	rules            string
	pendSet, rateSet bool
}

func quotaFlags() (*flag.FlagSet, *quotaOpts) {
	o := &quotaOpts{pending: -1, rate: -1}
	fs := flag.NewFlagSet("quota", flag.ContinueOnError)
	fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	fs.Int64Var(&o.pending, "pending", -1, "set: the most messages the scope may hold (0: no limit; left out: as set)")
	fs.Int64Var(&o.rate, "rate", -1, "set: the most messages the scope may enqueue a second (0: no limit; left out: as set)")
	fs.StringVar(&o.rules, "rules", "", "set: the scope's rules (topic=... exchange=... ids=...) when "+envPrefix+"_SCOPES_FILE does not define it")
	return fs, o
}

// runQuota lists the quotas, or sets or deletes one: a change writes an
// audit line.
func runQuota(ctx context.Context, e *env, args []string) int {
	fs, o := quotaFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	fs.Visit(func(f *flag.Flag) {
		o.pendSet = o.pendSet || f.Name == "pending"
		o.rateSet = o.rateSet || f.Name == "rate"
	})
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq quota: %s\nusage: delayq quota %s\n", msg, quotaCommand().args)
		return exitUsage
	}
	op := "show"
	if len(pos) > 0 {
		op = pos[0]
	}
	switch {
	case op != "show" && op != "set" && op != "delete":
		return usage(fmt.Sprintf("unknown subcommand %q", op))
	case op == "show" && len(pos) > 0, op != "show" && len(pos) != 2:
		return usage("set and delete take one scope")
	case op != "set" && (o.pendSet || o.rateSet || o.rules != ""):
		return usage("--pending, --rate and --rules go with set")
	case op == "set" && !o.pendSet && !o.rateSet:
		return usage("set needs --pending or --rate")
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("quota", err)
	}
	defer rdb.Close()
	switch op {
	case "set":
		err = setQuota(ctx, e, st, pos[1], o)
	case "delete":
		err = st.DeleteQuota(ctx, pos[1])
	}
	if op != "show" {
		e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "quota "+op), zap.String("target", "scope "+pos[1]),
			zap.String("result", resultOf(err)))
		if err != nil {
			return e.fail("quota", err)
		}
	}
	qs, err := st.Quotas(ctx)
	if err != nil {
		return e.fail("quota", err)
	}
	if o.asJSON {
		if qs == nil {
			qs = []shard.QuotaUsage{}
		}
		return writeJSON(e, qs)
	}
	if len(qs) == 0 {
		fmt.Fprintln(e.stdout, "no quotas")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tHELD\tMAX PENDING\tMAX RATE\tREFUSED\tRULES")
	limit := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, q := range qs {
		held := fmt.Sprint(q.Count)
		if q.Adopting {
			held += " (counting what it held)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", q.Scope, held, limit(q.MaxPending), limit(q.MaxRate)+"/s", q.Refused, q.Rules)
	}
	_ = tw.Flush()
	return exitOK
}

// setQuota sets scope name's quota: the limits given, the others kept;
// the rules given, or the quota's, or the scopes file's.
func setQuota(ctx context.Context, e *env, st *shard.Store, name string, o *quotaOpts) error {
	have, err := st.Quotas(ctx)
	if err != nil && !errors.Is(err, shard.ErrCorruptQuota) { // setting it again mends a corrupt one
		return err
	}
	q := shard.Quota{Scope: name, Rules: o.rules, Source: "cli"}
	for _, h := range have {
		if h.Scope == name {
			q.MaxPending, q.MaxRate = h.MaxPending, h.MaxRate
			if q.Rules == "" {
				q.Rules = h.Rules
			}
		}
	}
	if o.rules == "" {
		scopes, err := e.cfg.scopes()
		if err != nil {
			return err
		}
		if sc, ok := scopes.Get(name); ok {
			q.Rules = rulesOf(sc.String(), name)
		}
	}
	if q.Rules == "" {
		return &shard.InvalidError{Field: "scope", Reason: fmt.Sprintf("no scope %q in %s_SCOPES_FILE; give its rules with --rules", name, envPrefix)}
	}
	if o.pendSet {
		q.MaxPending = o.pending
	}
	if o.rateSet {
		q.MaxRate = o.rate
	}
	return st.SetQuota(ctx, q)
}

// rulesOf is a scope line without its name.
func rulesOf(line, name string) string {
	if len(line) > len(name) {
		return line[len(name)+1:]
	}
	return ""
}
