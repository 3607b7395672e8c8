package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/router"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

func classCommand() command {
	return command{name: "class", args: "[--json] | set NAME --topics P[,P...] [--weight N | --strict] | delete NAME",
		summary: "release classes: who goes first, by weight, when the fleet is behind", run: runClass,
		flags: func() *flag.FlagSet { fs, _, _, _, _ := classFlags(); return fs }}
}

func classFlags() (fs *flag.FlagSet, asJSON *bool, topics *string, weight *int, strict *bool) {
	fs = flag.NewFlagSet("class", flag.ContinueOnError)
	asJSON = fs.Bool("json", false, "print JSON")
	topics = fs.String("topics", "", "set: the class's topic patterns, comma-separated: a topic, or a prefix ending in * (none for the default class)")
	weight = fs.Int("weight", 1, "set: the class's share of the releases while the fleet is behind, 1 to 1000; 0: only when no other class waits")
	strict = fs.Bool("strict", false, "set: release the class before every weighted class")
	return fs, asJSON, topics, weight, strict
}

// runClass lists the classes with their backlogs, or changes one: a change
// writes an audit line.
func runClass(ctx context.Context, e *env, args []string) int {
	fs, asJSON, topics, weight, strict := classFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq class: %s\nusage: delayq class %s\n", msg, classCommand().args)
		return exitUsage
	}
	op := "list"
	if len(pos) > 0 {
		op = pos[0]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case op != "list" && op != "set" && op != "delete":
		return usage(fmt.Sprintf("unknown subcommand %q", op))
	case op == "list" && len(pos) > 0, op != "list" && len(pos) != 2:
		return usage(op + " takes the class's name")
	case op != "set" && (set["topics"] || set["weight"] || set["strict"]):
		return usage("--topics, --weight and --strict go with set")
	case *strict && set["weight"]:
		return usage("a class is strict or has a weight, not both")
	}
	c := shard.Class{Weight: *weight, Strict: *strict, Topics: []string{}}
	if op != "list" {
		c.Name = pos[1]
	}
	if *topics != "" {
		for _, p := range strings.Split(*topics, ",") {
			c.Topics = append(c.Topics, strings.TrimSpace(p))
		}
	}
	if op == "set" {
		if err := shard.ValidateClass(c); err != nil {
			return e.fail("class", err)
		}
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("class", err)
	}
	defer rdb.Close()
	if op == "list" {
		return e.listClasses(ctx, st, *asJSON)
	}
	target := "class " + c.Name
	if op == "delete" {
		err = st.DeleteClass(ctx, c.Name, "cli")
	} else if c, err = st.SetClass(ctx, c, "cli"); err == nil {
		target += ": " + c.String()
	}
	e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "class "+op), zap.String("target", target),
		zap.String("result", resultOf(err)))
	if err != nil {
		return e.fail("class", err)
	}
	switch {
	case op == "delete":
		fmt.Fprintf(e.stdout, "class %s deleted: its topics are in the default class; what waits in its backlog still drains\n", c.Name)
	case *asJSON:
		return writeJSON(e, httpapi.ClassOf(shard.ClassStatus{Class: c, OldestMs: -1}, 0))
	default:
		fmt.Fprintf(e.stdout, "%s: %s\n", c.Name, c)
	}
	return exitOK
}

// classViews reads every class with its backlog and release rate (nil
// without classes); a stored value that cannot be read is said on stderr.
func (e *env) classViews(ctx context.Context, st *shard.Store, n int) ([]httpapi.Class, error) {
	sts, err := st.ClassStatuses(ctx, n)
	if sts == nil && err != nil {
		return nil, err
	}
	if err != nil { // some values unreadable: show the others, say which
		fmt.Fprintf(e.stderr, "delayq: %v\n", err)
	}
	r, err := st.Rates(ctx, httpapi.DefaultRatesWindow)
	if err != nil {
		return nil, err
	}
	return httpapi.ClassesOf(sts, r), nil
}

// listClasses prints every class with what waits in its backlog.
func (e *env) listClasses(ctx context.Context, st *shard.Store, asJSON bool) int {
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("class", err)
	}
	cs, err := e.classViews(ctx, st, n)
	if err != nil {
		return e.fail("class", err)
	}
	if asJSON {
		if cs == nil {
			cs = []httpapi.Class{}
		}
		return writeJSON(e, cs)
	}
	if cs == nil {
		fmt.Fprintln(e.stdout, "no release classes: when the fleet is behind, releases go in due order")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tshare\ttopics\tbacklog\toldest\treleased/s\tchanged by\t")
	for _, c := range cs {
		share := fmt.Sprintf("weight %d", c.Weight)
		switch {
		case c.Deleted:
			share = "deleted"
		case c.Strict:
			share = "strict"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.1f\t%s\t\n", c.Name, share, orDash(strings.Join(c.Topics, " ")), c.Backlog,
			time.Duration(c.OldestSec*float64(time.Second)).Round(time.Millisecond), c.ReleasedPerSec, orDash(c.ChangedBy))
	}
	_ = tw.Flush()
	return exitOK
}

// applyRouteClasses stores the routes file's release classes in Redis,
// where every scanner of the namespace goes by them: a class of the file
// replaces one a routes file set (or is set where there was none); a class
// changed at runtime stays, with a warning; a class a routes file set that
// the file no longer has is deleted. Each change is an audit line. A
// class the file names but Redis refuses (its patterns overlap a class set
// at runtime) stops the scanner, naming both.
func (e *env) applyRouteClasses(ctx context.Context, st *shard.Store, routes *router.Table) error {
	have, err := st.Classes(ctx)
	if err != nil && have == nil {
		return fmt.Errorf("routes file classes: %w", err)
	}
	if err != nil {
		e.log.Warn("routes file classes: classes left out", zap.Error(err))
	}
	file := routes.Classes()
	for _, c := range have { // from an earlier file, gone from this one: deleted first, freeing its patterns
		if _, ok := file[c.Name]; !ok && c.Source == "routes" && c.DeletedMs == 0 {
			err := st.DeleteClass(ctx, c.Name, "routes")
			httpapi.Audit(e.log, "routes", e.cfg.RoutesFile, "class delete", "class "+c.Name, err)
			if err != nil {
				return fmt.Errorf("routes file %s: class %q: %w", e.cfg.RoutesFile, c.Name, err)
			}
		}
	}
	names := make([]string, 0, len(file))
	for n := range file {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		want := file[name].Shard(name)
		if i := slices.IndexFunc(have, func(c shard.Class) bool { return c.Name == name }); i >= 0 {
			if h := have[i]; h.Source == "routes" && h.DeletedMs == 0 && h.Weight == want.Weight && h.Strict == want.Strict &&
				slices.Equal(h.Topics, want.Topics) {
				continue // as the file says already
			}
		}
		c, changed, err := st.SetRoutesClass(ctx, want)
		if err != nil {
			return fmt.Errorf("routes file %s: class %q: %w", e.cfg.RoutesFile, name, err)
		}
		switch {
		case changed:
			httpapi.Audit(e.log, "routes", e.cfg.RoutesFile, "class set", "class "+name+": "+c.String(), nil)
		case c.Name != "":
			e.log.Warn("the routes file's class is not applied: it was changed at runtime; delayq class set changes it",
				zap.String("class", name), zap.String("routes", want.String()), zap.String("class_now", c.String()),
				zap.String("changed_by", c.Source))
		}
	}
	return nil
}
