package balance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/zap"
)

// ServiceName is the Consul service every scanner registers as.
const ServiceName = "delayq-scanner"

// Registration is one scanner's entry in the Consul catalog, with a TTL
// health check that a goroutine keeps passing until Close deregisters it.
// If the process dies without Close, the check goes critical after the TTL
// and Consul removes the entry a minute later.
type Registration struct {
	agent   *api.Agent
	ns      string
	host    string
	stopped bool
	id      string
	checkID string
	log     *zap.Logger
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// RegistrationTTL is the TTL of a scanner's health check; it is renewed
// every third of it.
const RegistrationTTL = 10 * time.Second

// NewRegistration prepares this process's entry in the catalog as a
// scanner of namespace ns; Start adds it.
func NewRegistration(client *api.Client, ns string, log *zap.Logger) *Registration {
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s-%s-%s-%d", ServiceName, ns, host, os.Getpid())
	return &Registration{agent: client.Agent(), ns: ns, host: host, id: id, checkID: id + ":ttl", log: log.Named("registration")}
}

// Start adds the entry to the catalog (ctx bounds that call) and renews
// its health check in a goroutine until Stop.
func (r *Registration) Start(ctx context.Context) error {
	if r.cancel != nil {
		return errors.New("registration already started")
	}
	id, ns, host := r.id, r.ns, r.host
	err := r.agent.ServiceRegisterOpts(&api.AgentServiceRegistration{
		ID:   id,
		Name: ServiceName,
		Tags: []string{ns},
		Meta: map[string]string{"namespace": ns, "host": host, "pid": strconv.Itoa(os.Getpid())},
		Check: &api.AgentServiceCheck{
			CheckID:                        r.checkID,
			TTL:                            RegistrationTTL.String(),
			Status:                         api.HealthPassing,
			DeregisterCriticalServiceAfter: "1m",
		},
	}, api.ServiceRegisterOpts{}.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("register %s in consul: %w", id, err)
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.wg.Go(func() {
		everyTick(ctx, RegistrationTTL/3, func() {
			if err := r.agent.UpdateTTLOpts(r.checkID, "claiming", api.HealthPassing, (&api.QueryOptions{}).WithContext(ctx)); err != nil && ctx.Err() == nil {
				r.log.Warn("renew consul health check", zap.String("check", r.checkID), zap.Error(err))
			}
		})
	})
	r.log.Info("registered in consul", zap.String("service_id", id))
	return nil
}

// ID returns the service id.
func (r *Registration) ID() string { return r.id }

// Stop stops renewing the check and deregisters the service (ctx bounds
// that call). Safe to call more than once; without a successful Start it
// does nothing.
func (r *Registration) Stop(ctx context.Context) error {
	if r.cancel == nil || r.stopped {
		return nil
	}
	r.stopped = true
	r.cancel()
	r.wg.Wait()
	if err := r.agent.ServiceDeregisterOpts(r.id, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deregister %s from consul: %w", r.id, err)
	}
	return nil
}

// Member is one scanner of the fleet as Consul sees it.
type Member struct {
	ID, Host, PID string
	Status        string // passing, warning, critical
}

// Fleet lists the scanners of namespace ns registered in Consul.
func Fleet(ctx context.Context, client *api.Client, ns string) ([]Member, error) {
	entries, _, err := client.Health().Service(ServiceName, ns, false, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s services: %w", ServiceName, err)
	}
	out := make([]Member, 0, len(entries))
	for _, e := range entries {
		out = append(out, Member{ID: e.Service.ID, Host: e.Service.Meta["host"], PID: e.Service.Meta["pid"],
			Status: e.Checks.AggregatedStatus()})
	}
	return out, nil
}

// everyTick calls f every period until ctx ends (the first call one
// period after the start).
func everyTick(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
