package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/delayq/delayq/balance/consultest"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard/shardtest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRabbitDefinitionsServeTheExampleRoutes: a RabbitMQ node that loads
// configs/rabbitmq/definitions.json at boot (and so seeds no guest user)
// has the user, vhost, exchanges, queues and bindings the example route
// table needs: a scanner logged in as that user publishes a message of
// each route into its queue, and nothing goes to the dead set.
func TestRabbitDefinitionsServeTheExampleRoutes(t *testing.T) {
	w := newWorld(t, 2, "DELAYQ_ROUTES_FILE=../../configs/routes.example.yaml", "DELAYQ_MAX_REFUSALS=1")
	node, err := publishertest.StartRabbitWith(publishertest.Options{
		Definitions: "../../configs/rabbitmq/definitions.json", Credentials: "delayq:CHANGE-ME"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	// Every exchange a shipped route table names is declared.
	var defs struct {
		Exchanges []struct{ Name string } `json:"exchanges"`
	}
	raw, err := os.ReadFile("../../configs/rabbitmq/definitions.json")
	must(t, err)
	must(t, json.Unmarshal(raw, &defs))
	declared := map[string]bool{"": true}
	for _, e := range defs.Exchanges {
		declared[e.Name] = true
	}
	var table struct {
		DefaultExchange string `yaml:"default_exchange"`
		Routes          map[string]struct {
			Exchange string `yaml:"exchange"`
		} `yaml:"routes"`
	}
	raw, err = os.ReadFile("../../configs/routes.example.yaml")
	must(t, err)
	must(t, yaml.Unmarshal(raw, &table))
	if !declared[table.DefaultExchange] {
		t.Errorf("routes.example.yaml: default exchange %q is not in definitions.json", table.DefaultExchange)
	}
	for topic, r := range table.Routes {
		if !declared[r.Exchange] {
			t.Errorf("routes.example.yaml: route %s names exchange %q, which definitions.json does not declare", topic, r.Exchange)
		}
	}

	w.scan("DELAYQ_AMQP_URL="+node.URL, "DELAYQ_INGRESS=delayq.ingress.orders=orders")
	for _, m := range [][]string{{"cancel-1", "order.cancel"}, {"trial-1", "trial.end"}, {"paid-1", "order.paid"}} {
		if _, e, code := w.delayq("", "enqueue", "--id", m[0], "--topic", m[1], "--delay", "0s"); code != 0 {
			t.Fatal(e)
		}
	}
	// The ingress: the publish-only producer user publishes to
	// orders.delayed as it did to a delayed-message exchange; a good
	// message reaches order-cancel, a bad one the ingress's dead letters.
	shop := strings.Replace(node.URL, "delayq:CHANGE-ME", "shop:CHANGE-ME", 1)
	conn, err := amqp.Dial(shop)
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	for _, p := range []amqp.Publishing{
		{MessageId: "ingress-1", Headers: amqp.Table{"x-delay": int32(100)}},
		{MessageId: "ingress-bad", Headers: amqp.Table{"x-delay": "soon"}},
	} {
		must(t, ch.PublishWithContext(context.Background(), "orders.delayed", "order.cancel.unpaid", false, false, p))
	}
	var out string
	shardtest.WaitFor(t, 60*time.Second, func() bool {
		out, _ = node.Ctl("list_queues", "-q", "name", "messages")
		counts := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				counts[f[0]] = f[1]
			}
		}
		// order.cancel by its route, order.paid through the default topic
		// exchange (bound with order.#), trial.end by the default exchange,
		// ingress-1 through the ingress.
		return counts["order-cancel"] == "3" && counts["trial-reminders"] == "1" && counts["delayq.ingress.dead"] == "1"
	}, func() string {
		st, _, _ := w.delayq("", "dead", "list")
		return "queues:\n" + out + "\ndead:\n" + st
	})
}

// TestConsulSeedLoads: configs/consul/kv.json imports into a real Consul
// with `consul kv import`, and delayq reads M from it.
func TestConsulSeedLoads(t *testing.T) {
	w := newWorld(t, 4)
	w.withConsul(t)
	bin, err := consultest.Binary()
	must(t, err)
	cmd := exec.Command(bin, "kv", "import", "-http-addr="+consul.Addr, "@../../configs/consul/kv.json")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("consul kv import: %v\n%s", err, out)
	}
	var seed []struct{ Key string }
	raw, err := os.ReadFile("../../configs/consul/kv.json")
	must(t, err)
	must(t, json.Unmarshal(raw, &seed))
	w.env = append(w.env, "DELAYQ_CONSUL_KEY="+seed[0].Key)
	if out, e, code := w.delayq("", "shards"); code != 0 || !strings.Contains(out, "M 16 from consul") {
		t.Errorf("shards after importing the seed: %d %s %s", code, out, e)
	}
}

// TestEnvExampleWorksAsEnvFile: configs/delayq.env.example, read as an env
// file (KEY=VALUE lines, most values empty), configures a working delayq:
// an empty variable counts as unset.
func TestEnvExampleWorksAsEnvFile(t *testing.T) {
	w := newWorld(t, 4)
	f, err := os.Open("../../configs/delayq.env.example")
	must(t, err)
	defer f.Close()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	must(t, sc.Err())
	// Point it at this test's servers, as a user edits the copy.
	env = append(env, "DELAYQ_REDIS_ADDRS="+redisSrv.Addr, "DELAYQ_AMQP_URL="+rabbit.URL, "DELAYQ_NAMESPACE="+w.ns,
		"DELAYQ_METRICS_ADDR=off")
	for _, args := range [][]string{{"stats"}, {"enqueue", "--id", "env-1", "--topic", "t", "--delay", "1h"}, {"inspect", "env-1"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("delayq %v with the example env file: %v\n%s", args, err, out)
		}
	}
}
