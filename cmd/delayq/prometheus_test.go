package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestAlertRulesPromtool: the alert rules load, and their unit tests
// (configs/prometheus/alerts_test.yaml: two pods reporting the same
// backlog, the whole fleet down, pods not ready) pass under promtool.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		shardtest.Require(t, fmt.Errorf("promtool (Debian's prometheus package): %w", shardtest.ErrNoBinary))
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../../configs/prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// prometheus is a Prometheus server scraping the given targets every
// second, with the project's alert rules loaded.
type prometheus struct {
	base string
	proc *shardtest.Proc
}

func startPrometheus(t *testing.T, targets ...string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		shardtest.Require(t, fmt.Errorf("prometheus (Debian's prometheus package): %w", shardtest.ErrNoBinary))
	}
	dir := t.TempDir()
	rules, err := filepath.Abs("../../configs/prometheus/alerts.yaml")
	must(t, err)
	quoted, _ := json.Marshal(targets)
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: delayq
    static_configs: [{targets: %s}]
`, rules, quoted)
	must(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	port, err := shardtest.FreePort()
	must(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log := filepath.Join(dir, "log")
	p, err := shardtest.StartProc(exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr), log)
	must(t, err)
	t.Cleanup(p.Kill)
	prom := &prometheus{base: "http://" + addr, proc: p}
	must(t, p.WaitReady("prometheus", 60*time.Second, 50*time.Millisecond, log, func() error {
		code, _ := get(prom.base + "/-/ready")
		if code != 200 {
			return fmt.Errorf("/-/ready %d", code)
		}
		return nil
	}))
	return prom
}

// query evaluates an instant PromQL query and returns its samples' values
// by label set.
func (p *prometheus) query(q string) ([]float64, error) {
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, errors.New(r.Error)
	}
	var out []float64
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v: %w", s.Value[1], err)
		}
		out = append(out, v)
	}
	return out, nil
}

// TestDashboardAndAlertsOnRealPrometheus: a real Prometheus scrapes two
// scanners of one namespace that hold a backlog (they cannot reach
// RabbitMQ, so it stays put). Every dashboard query evaluates; the backlog
// panel and the alert's expression show the real backlog, not the backlog
// times the number of pods; every alert rule loads healthy.
func TestDashboardAndAlertsOnRealPrometheus(t *testing.T) {
	w := newWorld(t, 4)
	port, err := shardtest.FreePort()
	must(t, err)
	noBroker := "DELAYQ_AMQP_URL=amqp://guest:guest@127.0.0.1:" + strconv.Itoa(port) + "/"
	a, b := w.scan(noBroker), w.scan(noBroker)
	const backlog = 300
	in, _ := w.jsonl(backlog, time.Millisecond, "due")
	if _, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	prom := startPrometheus(t, a.metrics, b.metrics)

	const due = `sum by (namespace) (max by (namespace, shard) (delayq_shard_due{namespace="%s"}))`
	var got []float64
	shardtest.WaitFor(t, 60*time.Second, func() bool { // both pods scraped, with the whole backlog
		got, err = prom.query(fmt.Sprintf(`count by (namespace) (delayq_shard_due{namespace="%s"} > 0)`, w.ns))
		if err != nil || len(got) != 1 || got[0] != 8 { // 4 shards x 2 pods
			return false
		}
		got, err = prom.query(fmt.Sprintf(`min(sum by (instance) (delayq_shard_due{namespace="%s"}))`, w.ns))
		return err == nil && len(got) == 1 && got[0] == backlog
	}, func() string { return fmt.Sprintf("scrapes of the two pods: %v %v", got, err) })
	shardtest.WaitFor(t, 60*time.Second, func() bool {
		got, err = prom.query(fmt.Sprintf(due, w.ns))
		return err == nil && len(got) == 1 && got[0] == backlog
	}, func() string { return fmt.Sprintf("backlog query: %v %v, want [%d]", got, err, backlog) })
	naive, err := prom.query(fmt.Sprintf(`sum(delayq_shard_due{namespace="%s"})`, w.ns))
	if err != nil || len(naive) != 1 || naive[0] != 2*backlog {
		t.Errorf("the plain sum over two pods: %v %v (want %d, which is why the queries take max first)", naive, err, 2*backlog)
	}

	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile("../../configs/grafana/delayq.json")
	must(t, err)
	must(t, json.Unmarshal(raw, &d))
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if _, err := prom.query(tg.Expr); err != nil {
				t.Errorf("dashboard panel %q: %s: %v", p.Title, tg.Expr, err)
			}
			if tg.Expr == "sum by (namespace) (max by (namespace, shard) (delayq_shard_due))" {
				v, _ := prom.query(fmt.Sprintf(due, w.ns))
				if len(v) != 1 || v[0] != backlog {
					t.Errorf("backlog panel shows %v, want %d", v, backlog)
				}
			}
		}
	}

	// The rules load and evaluate without error; the pods that cannot
	// reach RabbitMQ make DelayqScannerNotReady pending.
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name   string `json:"name"`
					Health string `json:"health"`
					State  string `json:"state"`
					Error  string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		resp, err := http.Get(prom.base + "/api/v1/rules")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&rules) != nil || len(rules.Data.Groups) == 0 {
			return false
		}
		for _, r := range rules.Data.Groups[0].Rules {
			if r.Name == "DelayqScannerNotReady" && r.State == "pending" {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("rules: %+v", rules) })
	n := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q %s", r.Name, r.Health, r.Error)
			}
		}
	}
	if n < 7 {
		t.Errorf("Prometheus loaded %d rules, want 7", n)
	}
}
