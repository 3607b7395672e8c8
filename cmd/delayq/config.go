package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/kelseyhightower/envconfig"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher/amqpdial"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/ingress"
)

// envPrefix prefixes every variable: DELAYQ_REDIS_ADDRS, ...
const envPrefix = "DELAYQ"

// Config is every setting of every subcommand, read from the environment.
// `delayq <cmd> -h` prints this table; configs/README.md documents it.
type Config struct {
	RedisAddrs          []string      `envconfig:"REDIS_ADDRS" default:"127.0.0.1:6379" desc:"Redis address host:port (several, comma-separated, for a cluster)"`
	RedisUsername       string        `envconfig:"REDIS_USERNAME" desc:"Redis ACL user name"`
	RedisPassword       string        `envconfig:"REDIS_PASSWORD" desc:"Redis password (never logged)"`
	RedisDB             int           `envconfig:"REDIS_DB" default:"0" desc:"Redis database number (single server only)"`
	RedisCluster        bool          `envconfig:"REDIS_CLUSTER" default:"false" desc:"use the Redis Cluster client even with one seed address (several addresses imply it)"`
	RedisPassFile       string        `envconfig:"REDIS_PASSWORD_FILE" desc:"read the Redis password from this file (e.g. a mounted Kubernetes Secret)"`
	RedisSentinel       string        `envconfig:"REDIS_SENTINEL_MASTER" desc:"Redis Sentinel: the master's name; DELAYQ_REDIS_ADDRS are then the sentinels"`
	RedisSentPass       string        `envconfig:"REDIS_SENTINEL_PASSWORD" desc:"password of the sentinels (never logged), when they require one"`
	RedisWait           int           `envconfig:"REDIS_WAIT_REPLICAS" default:"0" desc:"enqueue, cancel, ack …: return only once this many replicas have the write (Redis WAIT); 0 = do not wait"`
	RedisWaitFor        time.Duration `envconfig:"REDIS_WAIT_TIMEOUT" default:"1s" desc:"how long a write waits for DELAYQ_REDIS_WAIT_REPLICAS; fewer in time is an error (the write may be lost in a failover)"`
	RedisAllowEviction  bool          `envconfig:"REDIS_ALLOW_EVICTION" default:"false" desc:"accept a Redis whose maxmemory-policy can evict scheduled messages (allkeys-*): without it scan, serve and every enqueue refuse to use it"`
	RedisCheckEvery     time.Duration `envconfig:"REDIS_CHECK_INTERVAL" default:"30s" desc:"scan: how often to read Redis's eviction policy, memory and persistence again (a failover may bring a master with other settings); a problem that appears is logged as an error"`
	RedisTLS            bool          `envconfig:"REDIS_TLS" default:"false" desc:"connect to Redis over TLS"`
	RedisTLSCA          string        `envconfig:"REDIS_TLS_CA" desc:"PEM file of the CA that signed Redis's certificate (default: the system's)"`
	RedisTLSCert        string        `envconfig:"REDIS_TLS_CERT" desc:"PEM client certificate for Redis (mutual TLS)"`
	RedisTLSKey         string        `envconfig:"REDIS_TLS_KEY" desc:"PEM key of DELAYQ_REDIS_TLS_CERT"`
	AMQPURL             string        `envconfig:"AMQP_URL" default:"amqp://guest:guest@127.0.0.1:5672/" desc:"RabbitMQ URL (amqps:// for TLS); several, comma-separated, for the nodes of a cluster (tried in turn); passwords are never logged"`
	AMQPURLFile         string        `envconfig:"AMQP_URL_FILE" desc:"read the RabbitMQ URL, with its credentials, from this file"`
	AMQPTLSCA           string        `envconfig:"AMQP_TLS_CA" desc:"amqps: PEM file of the CA that signed RabbitMQ's certificate (default: the system's)"`
	AMQPTLSCert         string        `envconfig:"AMQP_TLS_CERT" desc:"amqps: PEM client certificate (mutual TLS)"`
	AMQPTLSKey          string        `envconfig:"AMQP_TLS_KEY" desc:"amqps: PEM key of DELAYQ_AMQP_TLS_CERT"`
	Namespace           string        `envconfig:"NAMESPACE" default:"default" desc:"namespace of the Redis keys: [A-Za-z0-9._-], 1-64 chars"`
	Shards              int           `envconfig:"SHARDS" default:"16" desc:"M, the number of Redis shards; with Consul only the fallback while Consul is unreachable"`
	ConsulAddr          string        `envconfig:"CONSUL_ADDR" desc:"Consul HTTP address host:port; when set, M is read from DELAYQ_CONSUL_KEY and watched"`
	ConsulToken         string        `envconfig:"CONSUL_TOKEN" desc:"Consul ACL token (never logged)"`
	ConsulTokenFile     string        `envconfig:"CONSUL_TOKEN_FILE" desc:"read the Consul ACL token from this file"`
	ConsulTLSCA         string        `envconfig:"CONSUL_TLS_CA" desc:"PEM file of the CA of Consul's HTTPS certificate; setting any CONSUL_TLS_* uses https"`
	ConsulTLSCert       string        `envconfig:"CONSUL_TLS_CERT" desc:"PEM client certificate for Consul"`
	ConsulTLSKey        string        `envconfig:"CONSUL_TLS_KEY" desc:"PEM key of DELAYQ_CONSUL_TLS_CERT"`
	ConsulKey           string        `envconfig:"CONSUL_KEY" desc:"Consul KV key holding M (default delayq/<namespace>/shards)"`
	Goroutines          int           `envconfig:"GOROUTINES" default:"128" desc:"scan: claim loops per scanner process"`
	ClaimBatch          int           `envconfig:"CLAIM_BATCH" default:"1" desc:"scan: most messages one claim takes"`
	Window              int           `envconfig:"WINDOW" default:"160" desc:"scan: most messages a process holds claimed and not yet confirmed by the broker (at least CLAIM_BATCH); a full window stops claims. Bounds a process to WINDOW / confirm round trip msg/s; more unconfirmed publishes cost the broker more CPU per message"`
	Lease               time.Duration `envconfig:"LEASE" default:"30s" desc:"scan: time a claimed message may stay unconfirmed before it is re-queued"`
	MaxRefusals         int           `envconfig:"MAX_REFUSALS" default:"5" desc:"scan: publishes the broker may refuse (nack, unroutable, no exchange) before a message goes to the dead set"`
	PublishGather       time.Duration `envconfig:"PUBLISH_GATHER" default:"0" desc:"scan: a publish after a pause waits this long for the next ones to share its socket write (the broker reads and confirms them together: a little less broker CPU at steady loads, about this much more latency); 0 = no wait: only the publishes ready at that moment share it"`
	MaxBody             int           `envconfig:"MAX_BODY" default:"1048576" desc:"enqueue: largest message body in bytes"`
	MaxPending          int           `envconfig:"MAX_PENDING" default:"0" desc:"enqueue: most messages the namespace may hold (each shard its share); 0 = no limit"`
	RoutesFile          string        `envconfig:"ROUTES_FILE" desc:"scan: YAML or JSON route table, topic -> exchange/routing key"`
	DefaultExchange     string        `envconfig:"DEFAULT_EXCHANGE" desc:"scan: exchange for topics without a route (routing key = topic)"`
	Ingress             string        `envconfig:"INGRESS" desc:"scan: AMQP ingress queues to consume, queue=exchange[@scope],… (exchange: where their messages go when due; empty: the default exchange; scope: all the queue may schedule into, one of DELAYQ_SCOPES_FILE)"`
	IngressPrefetch     int           `envconfig:"INGRESS_PREFETCH" default:"2048" desc:"scan: ingress deliveries held unacked per queue (a Redis write takes up to half); memory up to this many bodies"`
	IngressCancelWindow time.Duration `envconfig:"INGRESS_CANCEL_WINDOW" default:"1m" desc:"scan: a cancel over AMQP that finds nothing refuses a message with that id for this long (it may come right behind, through another scanner); 0 = never"`
	RatesEvery          time.Duration `envconfig:"RATES_EVERY" default:"10s" desc:"scan, serve: how often the fleet's counters are sampled for the rates on the console and /v1/stats (the first process after the interval takes the sample); 0 = this process never does"`
	ShutdownTimeout     time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"25s" desc:"scan: on SIGTERM, how long to wait for outstanding confirms"`
	Pprof               bool          `envconfig:"PPROF" default:"false" desc:"scan: also serve Go's profiles under /debug/pprof/ on the metrics listener, with block and mutex profiling on (for finding causes; costs a little CPU)"`
	MetricsAddr         string        `envconfig:"METRICS_ADDR" default:"127.0.0.1:9464" desc:"scan: listener for /metrics, /healthz and /readyz; 'off' to disable"`
	HTTPAddr            string        `envconfig:"HTTP_ADDR" default:"127.0.0.1:8080" desc:"serve: listener of the HTTP API (/v1) and the web console (/)"`
	HTTPTokensFile      string        `envconfig:"HTTP_TOKENS_FILE" desc:"serve: bearer tokens, one 'ROLE TOKEN [NAME [SCOPE]]' a line (ROLE read, produce, operate or admin; NAME for the audit log; SCOPE limits it to one of DELAYQ_SCOPES_FILE); without it serve listens on loopback only"`
	ScopesFile          string        `envconfig:"SCOPES_FILE" desc:"serve, scan: the teams sharing the namespace, one 'NAME RULE...' a line (RULE topic=PATTERN, exchange=EXCHANGE[/KEY-PATTERN] or ids=PREFIX, and the team's quota pending=N rate=N; see shard/scope)"`
	HTTPAllowedHosts    []string      `envconfig:"HTTP_ALLOWED_HOSTS" desc:"serve: host names the API and console answer to besides IP addresses and localhost, comma-separated (a request naming another host is refused: DNS rebinding); * for any"`
	HTTPSecretFile      string        `envconfig:"HTTP_SECRET_FILE" desc:"serve: a secret (at least 32 bytes) that signs console sessions and forms, the same for every instance; default: derived from the tokens file"`
	HTTPTLSCert         string        `envconfig:"HTTP_TLS_CERT" desc:"serve: PEM certificate to serve HTTPS with"`
	HTTPTLSKey          string        `envconfig:"HTTP_TLS_KEY" desc:"serve: PEM key of DELAYQ_HTTP_TLS_CERT"`
	LogLevel            string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	LogFormat           string        `envconfig:"LOG_FORMAT" default:"json" desc:"json or console"`
}

// loadConfig reads and checks the environment, reading secrets given as
// *_FILE variables. A variable set to the empty string counts as unset (an
// env file that lists every variable, most of them empty, means the
// defaults), so it is removed from the environment first.
func loadConfig() (Config, error) {
	var c Config
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); v == "" && strings.HasPrefix(k, envPrefix+"_") {
			_ = os.Unsetenv(k)
		}
	}
	if err := envconfig.Process(envPrefix, &c); err != nil {
		return c, configError(err)
	}
	for _, s := range []struct {
		name, file string
		value      *string
	}{
		{"REDIS_PASSWORD", c.RedisPassFile, &c.RedisPassword},
		{"AMQP_URL", c.AMQPURLFile, &c.AMQPURL},
		{"CONSUL_TOKEN", c.ConsulTokenFile, &c.ConsulToken},
	} {
		if s.file == "" {
			continue
		}
		if _, set := os.LookupEnv(envPrefix + "_" + s.name); set {
			return c, fmt.Errorf("give %s_%s or %s_%s_FILE, not both", envPrefix, s.name, envPrefix, s.name)
		}
		b, err := os.ReadFile(s.file)
		if err != nil {
			return c, fmt.Errorf("%s_%s_FILE: %w", envPrefix, s.name, err)
		}
		*s.value = strings.TrimRight(string(b), "\r\n")
	}
	return c, c.validate()
}

// tlsFiles builds a client TLS configuration from PEM files; errors name
// the variable and the file, never a key's contents.
func tlsFiles(prefix, ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s_CA: %w", prefix, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CA %s: no PEM certificate in it", prefix, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%s_CERT and %s_KEY go together", prefix, prefix)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s_CERT/_KEY (%s, %s): %w", prefix, cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func (c Config) validate() error {
	if len(c.RedisAddrs) == 0 || c.RedisAddrs[0] == "" {
		return fmt.Errorf("%s_REDIS_ADDRS: empty", envPrefix)
	}
	if err := shard.ValidateNamespace(c.Namespace); err != nil {
		return fmt.Errorf("%s_NAMESPACE: %w", envPrefix, err)
	}
	if _, err := balance.NewStatic(c.Shards); err != nil {
		return fmt.Errorf("%s_SHARDS: %w", envPrefix, err)
	}
	if c.RedisSentinel != "" && c.RedisCluster {
		return fmt.Errorf("%s_REDIS_SENTINEL_MASTER and %s_REDIS_CLUSTER: give one (Sentinel watches a single master)", envPrefix, envPrefix)
	}
	if c.RatesEvery != 0 && (c.RatesEvery < 100*time.Millisecond || c.RatesEvery > shard.RatesKeep/2) {
		return fmt.Errorf("%s_RATES_EVERY: %s, want 0 (never) or 100ms to %s (e.g. 10s)", envPrefix, c.RatesEvery, shard.RatesKeep/2)
	}
	if c.RedisWait < 0 || c.RedisWait > 100 {
		return fmt.Errorf("%s_REDIS_WAIT_REPLICAS: %d, want 0 (do not wait) to 100", envPrefix, c.RedisWait)
	}
	if c.RedisWait > 0 && (c.RedisCluster || c.RedisSentinel == "" && len(c.RedisAddrs) > 1) {
		return fmt.Errorf("%s_REDIS_WAIT_REPLICAS: WAIT counts the replicas of one master; it does not work with Redis Cluster", envPrefix)
	}
	if c.RedisWaitFor < time.Millisecond {
		return fmt.Errorf("%s_REDIS_WAIT_TIMEOUT: %s, want at least 1ms (e.g. 1s)", envPrefix, c.RedisWaitFor)
	}
	if c.MaxPending < 0 {
		return fmt.Errorf("%s_MAX_PENDING: %d, want 0 (no limit) or more", envPrefix, c.MaxPending)
	}
	if c.MaxBody < 1 {
		return fmt.Errorf("%s_MAX_BODY: %d, want at least 1", envPrefix, c.MaxBody)
	}
	if _, err := zapcore.ParseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("%s_LOG_LEVEL: %w", envPrefix, err)
	}
	// TLS files are checked now, so that a missing key or a bad CA file is
	// a configuration error (exit 2), not a connection failure.
	if c.RedisTLS {
		if _, err := tlsFiles(envPrefix+"_REDIS_TLS", c.RedisTLSCA, c.RedisTLSCert, c.RedisTLSKey); err != nil {
			return err
		}
	}
	for i, u := range c.amqpURLs() {
		if _, err := amqp.ParseURI(u); err != nil {
			return fmt.Errorf("%s_AMQP_URL: URL %d (%s): %w", envPrefix, i+1, amqpdial.Redact(u), err)
		}
	}
	if c.amqpTLS() {
		if _, err := tlsFiles(envPrefix+"_AMQP_TLS", c.AMQPTLSCA, c.AMQPTLSCert, c.AMQPTLSKey); err != nil {
			return err
		}
	}
	if (c.ConsulTLSCert == "") != (c.ConsulTLSKey == "") {
		return fmt.Errorf("%s_CONSUL_TLS_CERT and %s_CONSUL_TLS_KEY go together", envPrefix, envPrefix)
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		return fmt.Errorf("%s_LOG_FORMAT: %q, want json or console", envPrefix, c.LogFormat)
	}
	return nil
}

// consulKey is the KV key of M.
func (c Config) consulKey() string {
	if c.ConsulKey != "" {
		return c.ConsulKey
	}
	return balance.DefaultConsulKey(c.Namespace)
}

// newConsul returns a Consul API client, or nil when none is configured.
func newConsul(c Config) (*api.Client, error) {
	if c.ConsulAddr == "" {
		return nil, nil
	}
	cfg := &api.Config{Address: c.ConsulAddr, Token: c.ConsulToken}
	if c.ConsulTLSCA != "" || c.ConsulTLSCert != "" || c.ConsulTLSKey != "" {
		cfg.Scheme = "https"
		cfg.TLSConfig = api.TLSConfig{CAFile: c.ConsulTLSCA, CertFile: c.ConsulTLSCert, KeyFile: c.ConsulTLSKey}
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s_CONSUL_ADDR %s: %w", envPrefix, c.ConsulAddr, err)
	}
	return cl, nil
}

// validateScan checks the settings only `delayq scan` uses, naming the
// variable: a value that cannot work is refused, never replaced by a
// default.
func (c Config) validateScan() error {
	switch {
	case c.Goroutines < 1 || c.Goroutines > 4096:
		return fmt.Errorf("%s_GOROUTINES: %d, want 1 to 4096", envPrefix, c.Goroutines)
	case c.ClaimBatch < 1 || c.ClaimBatch > 1000:
		return fmt.Errorf("%s_CLAIM_BATCH: %d, want 1 to 1000", envPrefix, c.ClaimBatch)
	case c.Window < 1 || c.Window > 65536:
		return fmt.Errorf("%s_WINDOW: %d, want 1 to 65536", envPrefix, c.Window)
	case c.Lease < time.Second:
		return fmt.Errorf("%s_LEASE: %s, want at least 1s (e.g. 30s)", envPrefix, c.Lease)
	case c.MaxRefusals < 1 || c.MaxRefusals > 1000:
		return fmt.Errorf("%s_MAX_REFUSALS: %d, want 1 to 1000", envPrefix, c.MaxRefusals)
	case c.PublishGather < 0 || c.PublishGather > 100*time.Millisecond:
		return fmt.Errorf("%s_PUBLISH_GATHER: %s, want 0 (no wait) to 100ms (e.g. 1ms)", envPrefix, c.PublishGather)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("%s_SHUTDOWN_TIMEOUT: %s, want more than 0 (e.g. 25s)", envPrefix, c.ShutdownTimeout)
	case c.RedisCheckEvery <= 0:
		return fmt.Errorf("%s_REDIS_CHECK_INTERVAL: %s, want more than 0 (e.g. 30s)", envPrefix, c.RedisCheckEvery)
	case c.IngressPrefetch < 1 || c.IngressPrefetch > 65535:
		return fmt.Errorf("%s_INGRESS_PREFETCH: %d, want 1 to 65535", envPrefix, c.IngressPrefetch)
	case c.IngressCancelWindow < 0 || c.IngressCancelWindow > 24*time.Hour:
		return fmt.Errorf("%s_INGRESS_CANCEL_WINDOW: %s, want 0 (never) to 24h (e.g. 1m)", envPrefix, c.IngressCancelWindow)
	}
	if _, err := c.ingressRoutes(); err != nil {
		return err
	}
	if _, err := c.scopes(); err != nil {
		return err
	}
	if err := c.scannerConfig().Validate(); err != nil {
		return fmt.Errorf("scanner settings: %w", err)
	}
	return nil
}

// amqpURLs splits DELAYQ_AMQP_URL: the nodes of one RabbitMQ cluster.
func (c Config) amqpURLs() []string {
	var urls []string
	for _, u := range strings.Split(c.AMQPURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// amqpTLS reports whether any AMQP URL is amqps://.
func (c Config) amqpTLS() bool {
	for _, u := range c.amqpURLs() {
		if strings.HasPrefix(u, "amqps://") {
			return true
		}
	}
	return false
}

// amqpNodes is the redacted URLs, for logs and errors.
func (c Config) amqpNodes() string {
	urls := c.amqpURLs()
	for i, u := range urls {
		urls[i] = amqpdial.Redact(u)
	}
	return strings.Join(urls, ",")
}

// ingressRoutes parses DELAYQ_INGRESS: queue=exchange[@scope] entries
// separated by commas, scope one of DELAYQ_SCOPES_FILE. A queue name may
// not hold "=" or ",".
func (c Config) ingressRoutes() ([]ingress.Route, error) {
	if strings.TrimSpace(c.Ingress) == "" {
		return nil, nil
	}
	scopes, err := c.scopes()
	if err != nil {
		return nil, err
	}
	var routes []ingress.Route
	seen := map[string]bool{}
	for i, entry := range strings.Split(c.Ingress, ",") {
		entry = strings.TrimSpace(entry)
		q, x, ok := strings.Cut(entry, "=")
		q, x = strings.TrimSpace(q), strings.TrimSpace(x)
		switch {
		case !ok || q == "":
			return nil, fmt.Errorf("%s_INGRESS entry %d %q: want queue=exchange (exchange may be empty: the default exchange)", envPrefix, i+1, entry)
		case len(q) > shard.MaxNameLen || len(x) > shard.MaxNameLen:
			return nil, fmt.Errorf("%s_INGRESS entry %d: names are at most %d bytes", envPrefix, i+1, shard.MaxNameLen)
		case seen[q]:
			return nil, fmt.Errorf("%s_INGRESS entry %d: queue %q is listed twice", envPrefix, i+1, q)
		}
		seen[q] = true
		route := ingress.Route{Queue: q, Exchange: x}
		if at := strings.LastIndex(x, "@"); at >= 0 {
			name := x[at+1:]
			sc, ok := scopes.Get(name)
			if !ok {
				return nil, fmt.Errorf("%s_INGRESS entry %d: scope %q is not in %s_SCOPES_FILE", envPrefix, i+1, name, envPrefix)
			}
			route.Exchange, route.Scope = strings.TrimSpace(x[:at]), sc
		}
		routes = append(routes, route)
	}
	return routes, nil
}

func (c Config) scannerConfig() scanner.Config {
	return scanner.Config{Goroutines: c.Goroutines, ClaimBatch: c.ClaimBatch, Window: c.Window, Lease: c.Lease, MaxRefusals: c.MaxRefusals}
}

// printEnv writes the variables table for -h. Secrets have no defaults, so
// none can show here.
func printEnv(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nEnvironment:")
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	_ = envconfig.Usagef(envPrefix, &Config{}, tw, `{{range .}}  {{usage_key .}}{{"\t"}}{{usage_default .}}{{"\t"}}{{usage_description .}}
{{end}}`)
	_ = tw.Flush()
}

// newLogger builds the zap logger the config asks for.
func newLogger(c Config, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if c.LogFormat == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		encCfg.EncodeDuration = zapcore.StringDurationEncoder // "1.5s", not 1.5
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), level)), nil
}

// newRedis returns the Redis client of the config: a cluster client for
// several addresses or DELAYQ_REDIS_CLUSTER, else a single-server client.
// Its calls keep to their context's deadline (ContextTimeoutEnabled):
// without it go-redis waits out its own 3 s read timeout, and a frozen
// Redis held /readyz and every bounded call that long. The caller closes
// it.
func newRedis(c Config) (redis.UniversalClient, error) {
	var tlsCfg *tls.Config
	if c.RedisTLS {
		var err error
		if tlsCfg, err = tlsFiles(envPrefix+"_REDIS_TLS", c.RedisTLSCA, c.RedisTLSCert, c.RedisTLSKey); err != nil {
			return nil, err
		}
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		TLSConfig:        tlsCfg,
		Addrs:            c.RedisAddrs,
		Username:         c.RedisUsername,
		Password:         c.RedisPassword,
		DB:               c.RedisDB,
		IsClusterMode:    c.RedisCluster,
		MasterName:       c.RedisSentinel, // with a name, a Sentinel failover client over Addrs
		SentinelPassword: c.RedisSentPass,

		ContextTimeoutEnabled: true,
	}), nil
}

// pingRedis fails fast, with the address, when Redis cannot be reached.
func pingRedis(ctx context.Context, rdb redis.UniversalClient, c Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", strings.Join(c.RedisAddrs, ","), err)
	}
	return nil
}

// configError says which variable is wrong and what it should look like,
// in place of envconfig's and strconv's messages (Go type and field names).
func configError(err error) error {
	var pe *envconfig.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("configuration: %w", err)
	}
	want := "a valid value"
	switch pe.TypeName {
	case "int", "int64", "uint", "uint64":
		want = "a whole number"
	case "bool":
		want = "true or false"
	case "time.Duration":
		want = "a duration such as 30s, 5m or 1h30m"
	case "[]string":
		want = "a comma-separated list"
	}
	return fmt.Errorf("%s=%q: want %s", pe.KeyName, pe.Value, want)
}

// ingressCancelWindow is DELAYQ_INGRESS_CANCEL_WINDOW as ingress.Options
// takes it (negative: none).
func (c *Config) ingressCancelWindow() time.Duration {
	if c.IngressCancelWindow == 0 {
		return -1
	}
	return c.IngressCancelWindow
}
