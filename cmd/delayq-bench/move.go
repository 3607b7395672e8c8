package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/delayq/delayq/shard"
)

// ---- move: the source fleet's lateness while delayq move runs ----

// moveResult is the move scenario: one steady load (k, 2 scanners, 0.3 of
// the shared-core limit) on the source namespace, each time with Backlog
// messages due in an hour waiting there, in turn -rounds times: alone;
// while `delayq move` takes the backlog to another namespace on the same
// Redis (the same cores, as on this box a target Redis would be) as fast
// as it goes; and while it does so at --rate Rate, stopped when the run
// ends. The differences in lateness are what a live move costs the
// source's fleet.
type moveResult struct {
	Backlog   int             `json:"backlog"`
	Rate      float64         `json:"paced_rate_per_sec"`
	MovedIn   []time.Duration `json:"move_ns"`
	Without   []steadyResult  `json:"without_move"`
	With      []steadyResult  `json:"with_move"`
	WithPaced []steadyResult  `json:"with_paced_move"`
}

const (
	moveBenchFor  = 30 * time.Second
	moveBenchLoad = 0.3  // of the shared-core limit (d)
	moveBenchRate = 2000 // messages a second of the paced move
)

func (b *bench) move(ctx context.Context) error {
	k := b.c.batches[0]
	rate, err := b.loadRate(ctx, k, moveBenchLoad)
	if err != nil {
		return err
	}
	res := &moveResult{Backlog: b.c.backlog, Rate: moveBenchRate}
	b.res.Move = res
	for round := range b.c.rounds {
		for _, run := range []struct {
			name   string
			moving bool
			rate   float64
			into   *[]steadyResult
		}{{"alone", false, 0, &res.Without}, {"while delayq move runs", true, 0, &res.With},
			{fmt.Sprintf("while delayq move --rate %d runs", moveBenchRate), true, moveBenchRate, &res.WithPaced}} {
			s, took, err := b.moveRun(ctx, k, rate, run.moving, run.rate, res.Backlog)
			if err != nil {
				return err
			}
			*run.into = append(*run.into, s)
			if run.moving && run.rate == 0 {
				res.MovedIn = append(res.MovedIn, took)
				say("move: round %d: %d messages moved in %s (%.0f msg/s), during the steady run", round+1, res.Backlog,
					took.Round(time.Millisecond), float64(res.Backlog)/took.Seconds())
			}
			say("move: round %d, %s: %.0f/s, p50 %s p99 %s max %s, early %d, missing %d", round+1, run.name, s.Dispatch,
				ms(s.P50), ms(s.P99), ms(s.Max), s.Early, s.Missing)
		}
	}
	return nil
}

// moveRun is one steady run of the move scenario: with a move of the
// backlog from 5 s into it when moving, paced at pace when pace > 0 (and
// then stopped when the run ends); it returns the run and how long an
// unpaced move took.
func (b *bench) moveRun(ctx context.Context, k int, rate float64, moving bool, pace float64, backlog int) (steadyResult, time.Duration, error) {
	done := make(chan error, 1)
	var took time.Duration
	moveCtx, stopMove := context.WithCancel(ctx)
	defer stopMove()
	s, err := b.steadyRunWith(ctx, "move", k, 2, moveBenchLoad, rate, moveBenchFor, func(ns string, st *shard.Store) error {
		// Ids of their own (fill's would be the steady load's), due over
		// the hour after the next.
		if err := fillFar(ctx, st, backlog, time.Now().Add(time.Hour), time.Hour); err != nil {
			return err
		}
		if !moving {
			close(done)
			return nil
		}
		// The move starts 5 s into the run (the fleet starts after this
		// returns), when the stationary window begins.
		go func() {
			select {
			case <-time.After(5 * time.Second):
			case <-moveCtx.Done():
				done <- moveCtx.Err()
				return
			}
			args := []string{"move", "--to-redis", b.rs.Addr, "--to-namespace", ns + "-to", "--to-shards", fmt.Sprint(shards), "--keep", "30s"}
			if pace > 0 {
				args = append(args, "--rate", fmt.Sprint(pace))
			}
			cmd := exec.CommandContext(moveCtx, b.c.delayq, args...)
			cmd.Env = append(os.Environ(), "DELAYQ_REDIS_ADDRS="+b.rs.Addr, "DELAYQ_NAMESPACE="+ns,
				fmt.Sprintf("DELAYQ_SHARDS=%d", shards), "DELAYQ_LOG_LEVEL=error")
			began := time.Now()
			out, err := cmd.CombinedOutput()
			switch {
			case pace > 0: // stopped when the run ended
				err = nil
			case err != nil:
				err = fmt.Errorf("delayq move: %w: %s", err, out)
			case !strings.Contains(string(out), fmt.Sprintf("moved %d,", backlog)):
				err = fmt.Errorf("delayq move did not move the %d: %s", backlog, out)
			default:
				took = time.Since(began)
			}
			done <- err
		}()
		return nil
	})
	if err != nil {
		return s, 0, err
	}
	if pace > 0 {
		stopMove()
	}
	return s, took, <-done
}
