package main

import (
	"context"
	"errors"
	"fmt"
)

// part is the lifecycle every long-lived part of a process shares
// (publisher.Publisher, balance.ConsulWatcher, balance.Layout,
// balance.Registration, the ops server, scanner.Scanner): Start brings it
// up, and its ctx bounds only the start, never the goroutines it leaves
// running; Stop brings it down, ctx bounding the wait, and is safe to call
// twice or after a failed Start.
type part interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// parts starts parts in order and stops the started ones in reverse, so
// the shutdown order is written once: the start order, read backwards.
type parts struct {
	names   []string
	started []part
}

// start starts p and, if it started, adds it to the list.
func (ps *parts) start(ctx context.Context, name string, p part) error {
	if err := p.Start(ctx); err != nil {
		_ = p.Stop(context.WithoutCancel(ctx)) // safe after a failed Start
		return fmt.Errorf("start %s: %w", name, err)
	}
	ps.names, ps.started = append(ps.names, name), append(ps.started, p)
	return nil
}

// stop stops every started part, the last started first, and returns
// their errors joined for the caller to report; a part that fails to stop
// does not keep the others running.
func (ps *parts) stop(ctx context.Context) error {
	var errs []error
	for i := len(ps.started) - 1; i >= 0; i-- {
		if err := ps.started[i].Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", ps.names[i], err))
		}
	}
	ps.started, ps.names = nil, nil
	return errors.Join(errs...)
}

// partFuncs makes a part of two functions (a step of the shutdown that is
// not an object of its own, such as turning readiness off).
type partFuncs struct {
	start func(context.Context) error
	stop  func(context.Context) error
}

func (p partFuncs) Start(ctx context.Context) error {
	if p.start == nil {
		return nil
	}
	return p.start(ctx)
}

func (p partFuncs) Stop(ctx context.Context) error {
	if p.stop == nil {
		return nil
	}
	return p.stop(ctx)
}
