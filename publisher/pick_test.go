package publisher

import "testing"

func TestPickFillsTheFirstChannelFirst(t *testing.T) {
	chans := func(loads ...int64) []*channel {
		cs := make([]*channel, len(loads))
		for i, l := range loads {
			cs[i] = &channel{}
			cs[i].load.Store(l)
		}
		return cs
	}
	for _, tc := range []struct {
		name  string
		loads []int64
		want  int
	}{
		{"all idle: the first", []int64{0, 0, 0, 0}, 0},
		{"the first below its depth", []int64{fillDepth - 1, 0, 0, 0}, 0},
		{"the first full: the next", []int64{fillDepth, 3, 0, 0}, 1},
		{"a dead first: the next", []int64{deadLoad, 0, 0, 0}, 1},
		{"every one full: the least loaded", []int64{fillDepth + 5, fillDepth + 1, deadLoad, fillDepth + 2}, 1},
		{"every one dead: the first", []int64{deadLoad, deadLoad}, 0},
	} {
		cs := chans(tc.loads...)
		if got := pick(cs); got != cs[tc.want] {
			for i, c := range cs {
				if c == got {
					t.Errorf("%s: picked channel %d, want %d", tc.name, i, tc.want)
				}
			}
		}
	}
}

func TestSetLoadFollowsPendingAndDead(t *testing.T) {
	c := &channel{pending: map[uint64]*Confirm{}}
	c.pending[1], c.pending[2] = &Confirm{}, &Confirm{}
	c.setLoad()
	if got := c.load.Load(); got != 2 {
		t.Fatalf("load with two pending = %d, want 2", got)
	}
	c.dead = true
	c.setLoad()
	if got := c.load.Load(); got != deadLoad {
		t.Fatalf("load of a dead channel = %d, want deadLoad", got)
	}
}
