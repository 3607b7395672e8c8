package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/delayq/delayq/shard"
)

// DueProfile is what is about to fall due, as GET /v1/stats/due-profile
// shows it: scheduled messages per bucket of the time ahead.
type DueProfile struct {
	Resolution string      `json:"resolution"`      // minute (the next hour) or hour (the next 7 days)
	Topic      string      `json:"topic,omitempty"` // one topic's profile; empty: the namespace's
	Now        string      `json:"now"`             // the Redis clock, UTC
	Buckets    []DueBucket `json:"buckets"`
	Overdue    int64       `json:"overdue"`   // due now or earlier, not yet claimed
	InFlight   int64       `json:"in_flight"` // claimed, not yet settled
	Total      int64       `json:"total"`     // in the buckets
	Max        int64       `json:"max"`       // the largest bucket
	// OverdueSampled and InFlightSampled are DueBucket.Sampled for
	// Overdue and InFlight (a topic's profile).
	OverdueSampled  int64 `json:"overdue_sampled,omitempty"`
	InFlightSampled int64 `json:"in_flight_sampled,omitempty"`
}

// DueBucket is one bucket of a profile: [From, To), UTC.
type DueBucket struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Count int64  `json:"count"`
	// Sampled, in a topic's profile, is how many entries an estimated
	// count rests on (shard.TopicProfile); absent: the count is exact.
	Sampled int64 `json:"sampled,omitempty"`
}

// profileTTL is how long an instance reuses a profile: every viewer of an
// instance shares one computation.
const profileTTL = 5 * time.Second

// profiles caches the last profile of each resolution.
type profiles struct {
	mu   sync.Mutex
	last map[string]cachedProfile
}

type cachedProfile struct {
	at time.Time
	p  DueProfile
}

// ReadDueProfile returns the namespace's profile, or topic's when topic is
// set, at resolution "minute" (60 buckets) or "hour" (168). A topic must
// be known (shard.Store.KnownTopic). Cached for a few seconds.
func (a *API) ReadDueProfile(ctx context.Context, resolution, topic string) (DueProfile, error) {
	width, n := time.Minute, 60
	switch resolution {
	case "", "minute":
		resolution = "minute"
	case "hour":
		width, n = time.Hour, 168
	default:
		return DueProfile{}, &shard.InvalidError{Field: "resolution", Reason: "\"" + resolution + "\": want minute (the next hour) or hour (the next 7 days)"}
	}
	if topic != "" {
		if err := shard.ValidateFlowTopic(topic); err != nil {
			return DueProfile{}, err
		}
	}
	key := resolution + "\x00" + topic
	a.profiles.mu.Lock()
	defer a.profiles.mu.Unlock()
	if c, ok := a.profiles.last[key]; ok && time.Since(c.at) < profileTTL {
		return c.p, nil
	}
	if topic != "" {
		if err := a.o.Store.RequireKnownTopic(ctx, topic); err != nil {
			return DueProfile{}, err
		}
	}
	m, err := a.o.Shards(ctx)
	if err != nil {
		return DueProfile{}, err
	}
	var out DueProfile
	if topic == "" {
		p, err := a.o.Store.DueProfile(ctx, m, width, n)
		if err != nil {
			return DueProfile{}, err
		}
		out = ProfileOf(p, resolution)
	} else {
		p, err := a.o.Store.TopicProfile(ctx, m, topic, width, n)
		if err != nil {
			return DueProfile{}, err
		}
		out = TopicProfileOf(p, resolution)
	}
	if a.profiles.last == nil || len(a.profiles.last) >= maxCachedProfiles {
		a.profiles.last = map[string]cachedProfile{}
	}
	a.profiles.last[key] = cachedProfile{at: time.Now(), p: out}
	return out, nil
}

// maxCachedProfiles bounds the profiles an instance keeps (two
// resolutions of the namespace and of the topics viewed).
const maxCachedProfiles = 64

func (a *API) dueProfile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := a.ReadDueProfile(r.Context(), q.Get("resolution"), q.Get("topic"))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// ProfileOf renders a profile of the store at resolution (its name).
func ProfileOf(p shard.Profile, resolution string) DueProfile {
	out := DueProfile{Resolution: resolution, Now: p.Now.UTC().Format(time.RFC3339Nano), Overdue: p.Overdue, InFlight: p.InFlight,
		Buckets: make([]DueBucket, len(p.Counts))}
	for j, c := range p.Counts {
		from := p.Start.Add(time.Duration(j) * p.Width)
		if j == 0 {
			from = p.Now
		}
		out.Buckets[j] = DueBucket{From: from.UTC().Format(time.RFC3339Nano), To: p.Start.Add(time.Duration(j+1) * p.Width).UTC().Format(time.RFC3339),
			Count: c}
		out.Total += c
		out.Max = max(out.Max, c)
	}
	return out
}

// TopicProfileOf renders a topic's profile at resolution (its name).
func TopicProfileOf(p shard.TopicProfile, resolution string) DueProfile {
	out := ProfileOf(p.Profile, resolution)
	out.Topic, out.OverdueSampled, out.InFlightSampled = p.Topic, p.OverdueSampled, p.InFlightSampled
	for j := range out.Buckets {
		out.Buckets[j].Sampled = p.Sampled[j]
	}
	return out
}
