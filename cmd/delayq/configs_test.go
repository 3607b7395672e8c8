package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/delayq/delayq/router"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard/ingress"
)

// metricNames returns every metric name a scanner exports, with the
// _bucket/_sum/_count series of histograms.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	sm := scanner.NewMetrics(reg)
	names := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[mf.GetName()+s] = true
		}
	}
	// Read at scrape time by the collectors of the shards, flows, classes,
	// quotas, Redis, schedules and moves, and ops.go.
	descs := make(chan *prometheus.Desc, 64)
	scanner.NewShardCollector(nil, nil).Describe(descs)
	scanner.NewFlowCollector(nil, nil).Describe(descs)
	scanner.NewClassCollector(nil, nil).Describe(descs)
	scanner.NewQuotaCollector(nil, nil).Describe(descs)
	scanner.NewRedisCollector(nil).Describe(descs)
	scanner.NewScheduleCollector(nil).Describe(descs)
	scanner.NewMoveCollector(nil, nil).Describe(descs)
	// The ingress's vectors, and the flow, scope and class vectors, have no
	// sample until a message comes.
	im := ingress.NewMetrics(nil)
	for _, c := range []prometheus.Collector{im.Messages, im.Rejected, im.Batch, im.Consuming, sm.FlowReleased, sm.FlowLateness, sm.ScopePublished, sm.ScopeLateness,
		sm.ClassReleased, sm.ClassLateness} {
		c.Describe(descs)
	}
	close(descs)
	re := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			for _, s := range []string{"", "_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	names["delayq_amqp_ready"] = true
	names["delayq_amqp_node"] = true
	names["delayq_build_info"] = true
	return names
}

var metricRef = regexp.MustCompile(`\bdelayq_[a-z_]+`)

func checkMetricRefs(t *testing.T, file, text string, names map[string]bool) {
	t.Helper()
	refs := metricRef.FindAllString(text, -1)
	if len(refs) == 0 {
		t.Errorf("%s references no delayq metric", file)
	}
	for _, ref := range refs {
		if !names[ref] {
			t.Errorf("%s references %s, which no scanner exports", file, ref)
		}
	}
}

func TestAlertRulesUseRealMetrics(t *testing.T) {
	b, err := os.ReadFile("../../configs/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	names := metricNames(t)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("rule without alert name or expr: %+v", r)
			}
			checkMetricRefs(t, "alerts.yaml "+r.Alert, r.Expr, names)
		}
	}
	if n < 4 {
		t.Errorf("only %d alert rules", n)
	}
}

func TestGrafanaDashboardUsesRealMetrics(t *testing.T) {
	b, err := os.ReadFile("../../configs/grafana/delayq.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	names := metricNames(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			checkMetricRefs(t, "dashboard panel "+p.Title, tg.Expr, names)
		}
	}
	if len(d.Panels) < 6 {
		t.Errorf("only %d panels", len(d.Panels))
	}
}

// manifestKinds returns the documents of the Kubernetes manifest by kind.
func manifestKinds(t *testing.T) map[string]map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../configs/kubernetes/scanner.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	kinds := map[string]map[string]any{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return kinds
		} else if err != nil {
			t.Fatal(err)
		}
		kinds[doc["kind"].(string)] = doc
	}
}

func TestKubernetesManifests(t *testing.T) {
	kinds := manifestKinds(t)
	for _, k := range []string{"ConfigMap", "Secret", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		if kinds[k] == nil {
			t.Errorf("no %s", k)
		}
	}
	cm := kinds["ConfigMap"]["data"].(map[string]any)
	shutdown, err := time.ParseDuration(cm["DELAYQ_SHUTDOWN_TIMEOUT"].(string))
	if err != nil {
		t.Fatal(err)
	}
	spec := kinds["Deployment"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if grace := time.Duration(spec["terminationGracePeriodSeconds"].(int)) * time.Second; grace <= shutdown {
		t.Errorf("terminationGracePeriodSeconds %s is not above DELAYQ_SHUTDOWN_TIMEOUT %s", grace, shutdown)
	}
	c := spec["containers"].([]any)[0].(map[string]any)
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := c[probe].(map[string]any)["httpGet"].(map[string]any)["path"]; got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
	}
	// Every variable in the ConfigMap and Secret is one delayq reads.
	known := envKeys()
	for _, k := range []string{"ConfigMap", "Secret"} {
		data := kinds[k]["data"]
		if data == nil {
			data = kinds[k]["stringData"]
		}
		for key := range data.(map[string]any) {
			if strings.HasPrefix(key, envPrefix+"_") && !known[key] {
				t.Errorf("%s sets %s, which delayq does not read", k, key)
			}
		}
	}
	if _, err := router.Parse([]byte(cm["routes.yaml"].(string)), ""); err != nil {
		t.Errorf("routes.yaml in the ConfigMap: %v", err)
	}
}

func envKeys() map[string]bool {
	keys := map[string]bool{}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		keys[envPrefix+"_"+typ.Field(i).Tag.Get("envconfig")] = true
	}
	return keys
}

func TestEnvExampleListsEveryVariable(t *testing.T) {
	b, err := os.ReadFile("../../configs/delayq.env.example")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			set[k] = true
		}
	}
	for k := range envKeys() {
		if !set[k] {
			t.Errorf("configs/delayq.env.example lacks %s", k)
		}
	}
	for k := range set {
		if !envKeys()[k] {
			t.Errorf("configs/delayq.env.example sets %s, which delayq does not read", k)
		}
	}
}

func TestOtherConfigsParse(t *testing.T) {
	for _, f := range []string{"../../configs/rabbitmq/definitions.json", "../../configs/consul/kv.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
