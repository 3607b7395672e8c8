package scanner

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/shard"
)

// maxClaimPipeline is the most claims one round trip carries.
const maxClaimPipeline = 64

// recoverEvery is how often a claimer goroutine that holds receipts of
// lost claims presents them while no claim comes its way.
const recoverEvery = 250 * time.Millisecond

// claimPipelines is how many round trips of claims a process has under way
// at once: while Redis runs one pipeline, the next one gathers and goes
// out, so Redis never waits for the scanner between two.
const claimPipelines = 2

// claimer sends the claims of all the workers of a process to Redis
// together: the claims workers ask for while one round trip is under way
// go out in the next one, as one pipeline (shard.Store.ClaimShards). Each
// claim stays its own atomic script call of at most ClaimBatch messages,
// so claim batch 1 keeps the classic claim; what the pipeline saves is a
// read and a write syscall per claim in Redis and in the scanner, which is
// most of what a claim of one message costs. A lone claim goes out at once,
// so an idle or lightly loaded process sees no added latency.
//
// The claimer's goroutines (claimPipelines of them, serving the same
// requests) are started and stopped by the Scanner, after the workers:
// each answers every request it took.
//
// Each goroutine claims as its own shard.Claimant, so a claim whose reply
// is lost (Redis killed after it ran the claim, a connection cut) leaves
// a receipt; before its next round trip the goroutine presents the
// receipts it holds (shard.Store.Recover), and every recoverEvery while
// it holds some, which puts those messages back as due at once instead of
// after their lease. Receipts still held when
// the goroutine stops are presented once more, within the shutdown
// deadline; what is left comes back with its lease.
type claimer struct {
	store     *shard.Store
	k         int
	lease     time.Duration
	reqs      chan claimRequest
	hold      func() []string         // the topics under flow control, which claims set apart
	plan      func() *shard.ClassPlan // the release classes, by which a late shard's claims set apart (nil: none)
	recovered func(n int, err error)  // after each Recover: messages re-queued, and its error
}

type claimRequest struct {
	shard int
	reply chan<- claimReply
}

type claimReply struct {
	res shard.ClaimResult
	err error
}

func newClaimer(store *shard.Store, k int, lease time.Duration, hold func() []string, plan func() *shard.ClassPlan, recovered func(int, error)) *claimer {
	return &claimer{store: store, k: k, lease: lease, reqs: make(chan claimRequest, maxClaimPipeline), hold: hold, plan: plan, recovered: recovered}
}

// claim asks for a claim on shard i and waits for its outcome; reply is
// the caller's own channel (capacity 1), reused from claim to claim.
func (c *claimer) claim(ctx context.Context, i int, reply chan claimReply) (shard.ClaimResult, error) {
	select {
	case c.reqs <- claimRequest{shard: i, reply: reply}:
	case <-ctx.Done():
		return shard.ClaimResult{}, ctx.Err()
	}
	r := <-reply // always answered: run answers every request it took
	return r.res, r.err
}

// run serves claims until life ends; the round trips use workCtx (which
// ends only when Stop gives up on the work under way), also the last
// recovery of lost claims. Stop ends life only once no worker can ask any
// more.
func (c *claimer) run(life, workCtx context.Context) {
	me := shard.NewClaimant()
	batch := make([]claimRequest, 0, maxClaimPipeline)
	shards := make([]int, 0, maxClaimPipeline)
	for {
		batch, shards = batch[:0], shards[:0]
		// While it holds receipts, the goroutine presents them every
		// recoverEvery even when no claim comes its way: the other
		// goroutine may be taking every request.
		var again <-chan time.Time
		if me.Lost() > 0 {
			again = time.After(recoverEvery)
		}
		select {
		case r := <-c.reqs:
			batch = append(batch, r)
		case <-again:
			_ = c.recover(workCtx, me) // recovered reports it; the next turn tries again
			continue
		case <-life.Done():
			_ = c.recover(workCtx, me) // recovered reports it; what is left comes back with its lease
			return
		}
	gather:
		for len(batch) < maxClaimPipeline {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		for _, r := range batch {
			shards = append(shards, r.shard)
		}
		if err := c.recover(workCtx, me); err != nil {
			// A receipt's key is reused by the claimant's next claim of
			// its shard: no claim goes out before the receipts are
			// presented, or a new claim would overwrite the record of a
			// lost one (which would then wait for its lease).
			for _, r := range batch {
				r.reply <- claimReply{err: err}
			}
			continue
		}
		res, errs := c.store.ClaimFair(workCtx, me, shards, c.k, c.lease, c.hold(), c.plan())
		for j, r := range batch {
			r.reply <- claimReply{res: res[j], err: errs[j]}
		}
	}
}

// recover presents the receipts of me's lost claims, if it holds any, and
// returns an error while some are left to present.
func (c *claimer) recover(ctx context.Context, me *shard.Claimant) error {
	if me.Lost() == 0 {
		return nil
	}
	n, err := c.store.Recover(ctx, me)
	c.recovered(n, err)
	if me.Lost() > 0 {
		return fmt.Errorf("claims whose replies were lost are not recovered yet: %w", err)
	}
	return nil
}
