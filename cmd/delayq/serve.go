package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/console"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/scope"
)

func serveCommand() command {
	return command{name: "serve", summary: "serve the HTTP API (/v1) and the web console (/) until SIGINT/SIGTERM", run: runServe}
}

// runServe serves the API and the console. It keeps no state of its own,
// so several can run side by side. Shutdown: the listener stops taking
// requests and finishes those under way (up to DELAYQ_SHUTDOWN_TIMEOUT),
// then the layout and the Consul watch stop, then Redis closes.
func runServe(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "delayq serve: unexpected arguments %q\n", args)
		return exitUsage
	}
	c := e.cfg
	tokens, err := c.httpTokens()
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq serve: %v\n", err)
		return exitUsage
	}
	var tlsCfg *tls.Config
	if c.HTTPTLSCert != "" || c.HTTPTLSKey != "" {
		pair, err := tls.LoadX509KeyPair(c.HTTPTLSCert, c.HTTPTLSKey)
		if err != nil {
			fmt.Fprintf(e.stderr, "delayq serve: %s_HTTP_TLS_CERT/_KEY: %v\n", envPrefix, err)
			return exitUsage
		}
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	}
	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq serve: %s_HTTP_ADDR: %v\n", envPrefix, err)
		return exitUsage
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	defer rdb.Close()
	if _, err := e.checkRedis(ctx, st); err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	ps := &parts{}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
		defer cancel()
		if err := ps.stop(sctx); err != nil {
			e.log.Warn("shutdown incomplete", zap.Error(err))
		}
	}()
	layout, consul, err := e.layout(ctx, st, ps, watch)
	if err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	// The API's enqueues make create spans when the OTEL_* variables turn
	// tracing on; flushed after the listener stops.
	if err := ps.start(ctx, "tracing", &tracer{service: "delayq-serve"}); err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	if err := ps.start(ctx, "rates sampler", newRateSampler(st, c.RatesEvery, e.log)); err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	prod := shard.NewProducer(st, layout, shard.ProducerOptions{MaxBody: c.MaxBody, MaxPending: c.MaxPending,
		AllowEviction: c.RedisAllowEviction})
	scopes, err := c.scopes()
	if err == nil {
		err = st.ApplyScopeQuotas(ctx, scopes)
	}
	if err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	apiOpts := httpapi.Options{Producer: prod, Store: st, Tokens: tokens, Scopes: scopes, MaxBody: c.MaxBody, Log: e.log,
		Shards: func(ctx context.Context) (int, error) { return e.shardsToShow(ctx, st, consul) }}
	if consul != nil {
		apiOpts.SetShards = func(ctx context.Context, m, expect int) (int, error) {
			if _, err := balance.ParseShardCount(strconv.Itoa(m)); err != nil {
				return 0, &shard.InvalidError{Field: "m", Reason: err.Error()}
			}
			old, _, index, err := e.currentM(ctx, consul)
			if err != nil {
				return 0, err
			}
			if expect > 0 && old != expect {
				return old, httpapi.ErrShardsChanged
			}
			ok, err := balance.SetShardCount(ctx, consul, c.consulKey(), m, index)
			if err != nil {
				return old, err
			}
			if !ok {
				now, _, _, _ := e.currentM(ctx, consul)
				return now, httpapi.ErrShardsChanged
			}
			e.log.Info("M set over HTTP", zap.Int("from", old), zap.Int("to", m))
			return old, nil
		}
	}
	api := httpapi.New(apiOpts)
	// Stopped after the listener (parts stop in reverse): a bulk cancel
	// under way ends between two script calls.
	_ = ps.start(ctx, "bulk jobs", partFuncs{stop: api.Close})
	key, err := c.consoleKey(tokens)
	if err != nil {
		_ = ln.Close()
		fmt.Fprintf(e.stderr, "delayq serve: %v\n", err)
		return exitUsage
	}
	copts := console.Options{API: api, Producer: prod, Tokens: tokens, Secure: tlsCfg != nil, Log: e.log, Key: key, Sessions: st}
	if consul != nil {
		copts.Fleet = func(ctx context.Context) ([]string, error) {
			members, err := balance.Fleet(ctx, consul, c.Namespace)
			out := make([]string, len(members))
			for i, m := range members {
				out[i] = fmt.Sprintf("%s (%s)", m.Host, m.Status)
			}
			return out, err
		}
	}
	con, err := console.New(copts)
	if err != nil {
		_ = ln.Close()
		return e.fail("serve", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/", con.Handler())
	srv := &http.Server{Handler: httpapi.Guard(c.HTTPAllowedHosts, e.log.Named("http"), mux), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, ErrorLog: zap.NewStdLog(e.log.Named("http"))}
	var served sync.WaitGroup
	_ = ps.start(ctx, "http listener", partFuncs{
		start: func(context.Context) error {
			served.Go(func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					e.log.Error("http listener stopped", zap.Error(err))
				}
			})
			return nil
		},
		stop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			served.Wait()
			return err
		},
	})
	access := "tokens from " + c.HTTPTokensFile
	if tokens == nil {
		access = "no tokens: loopback only, every local caller is an admin"
		e.log.Warn("no DELAYQ_HTTP_TOKENS_FILE: anyone on this host can read and change messages; listening on loopback only")
	}
	e.log.Info("delayq serve running", zap.String("addr", ln.Addr().String()), zap.Bool("tls", tlsCfg != nil),
		zap.String("access", access), zap.String("layout", layout.Describe()))
	<-ctx.Done()
	e.log.Info("shutting down", zap.Duration("timeout", c.ShutdownTimeout))
	return exitOK
}

// httpTokens reads DELAYQ_HTTP_TOKENS_FILE (nil when unset), with the
// scopes its lines name (DELAYQ_SCOPES_FILE, read even without tokens, so
// a file that cannot be used is refused at start), and refuses a
// non-loopback DELAYQ_HTTP_ADDR without tokens.
func (c Config) httpTokens() (*httpapi.Tokens, error) {
	scopes, err := c.scopes()
	if err != nil {
		return nil, err
	}
	if c.HTTPTokensFile == "" {
		host, _, err := net.SplitHostPort(c.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("%s_HTTP_ADDR %q: %w", envPrefix, c.HTTPAddr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("%s_HTTP_ADDR %s is not a loopback address: set %s_HTTP_TOKENS_FILE, or listen on 127.0.0.1",
				envPrefix, c.HTTPAddr, envPrefix)
		}
		return nil, nil
	}
	f, err := os.Open(c.HTTPTokensFile)
	if err != nil {
		return nil, fmt.Errorf("%s_HTTP_TOKENS_FILE: %w", envPrefix, err)
	}
	defer f.Close()
	t, err := httpapi.ParseTokens(f, scopes)
	if err != nil {
		return nil, fmt.Errorf("%s_HTTP_TOKENS_FILE %s: %w", envPrefix, c.HTTPTokensFile, err)
	}
	return t, nil
}

// scopes reads DELAYQ_SCOPES_FILE (none when unset: a nil Set).
func (c Config) scopes() (*scope.Set, error) {
	if c.ScopesFile == "" {
		return nil, nil
	}
	f, err := os.Open(c.ScopesFile)
	if err != nil {
		return nil, fmt.Errorf("%s_SCOPES_FILE: %w", envPrefix, err)
	}
	defer f.Close()
	set, err := scope.ParseSet(f)
	if err != nil {
		return nil, fmt.Errorf("%s_SCOPES_FILE %s: %w", envPrefix, c.ScopesFile, err)
	}
	return set, nil
}

// consoleKey is the key that signs console sessions and forms: the
// contents of DELAYQ_HTTP_SECRET_FILE, or else one derived from the
// tokens, so that every instance given the same configuration accepts the
// others' sessions and forms. Without tokens nobody signs in: nil (a key
// of the process).
func (c Config) consoleKey(tokens *httpapi.Tokens) ([]byte, error) {
	if c.HTTPSecretFile == "" {
		return tokens.Key("console sessions"), nil
	}
	b, err := os.ReadFile(c.HTTPSecretFile)
	if err != nil {
		return nil, fmt.Errorf("%s_HTTP_SECRET_FILE: %w", envPrefix, err)
	}
	if b = bytes.TrimSpace(b); len(b) < 32 {
		return nil, fmt.Errorf("%s_HTTP_SECRET_FILE %s: %d bytes, want at least 32", envPrefix, c.HTTPSecretFile, len(b))
	}
	return b, nil
}
