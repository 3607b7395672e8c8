package httpapi

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
	"github.com/delayq/delayq/shard/tracing"
)

// Options configure an API.
type Options struct {
	Producer *shard.Producer
	Store    *shard.Store
	// Shards says how many shards may hold messages (the layout's
	// high-water mark, at least M): what stats and dead lists cover.
	Shards func(ctx context.Context) (int, error)
	// SetShards, when set, changes M with a check-and-set: to m, if M is
	// still expect (0: whatever it is); it returns the M it replaced.
	// ErrShardsStatic and ErrShardsChanged are its refusals.
	SetShards func(ctx context.Context, m, expect int) (from int, err error)
	// Tokens are the accepted bearer tokens; nil accepts every request
	// as an admin's (the caller then listens on loopback only).
	Tokens *Tokens
	// Scopes are the namespace's scopes (DELAYQ_SCOPES_FILE): a quota set
	// by name takes its scope's rules from them.
	Scopes *scope.Set
	// MaxBody is the largest message body (DELAYQ_MAX_BODY). Default
	// shard.DefaultMaxBody.
	MaxBody int
	Log     *zap.Logger
}

// Refusals of Options.SetShards.
var (
	// ErrShardsStatic: M is configured, not in Consul; it cannot be set.
	ErrShardsStatic = errors.New("the shard count is static (DELAYQ_SHARDS): setting it needs Consul")
	// ErrShardsChanged: M is no longer the one the caller expected.
	ErrShardsChanged = errors.New("the shard count changed meanwhile")
)

// Limits of a request.
const (
	MaxBatch     = 1000 // messages of one batch enqueue
	MaxDeadPage  = 500  // dead messages of one list page
	MaxSelection = 1000 // ids of one redrive or purge
)

// API serves the JSON API under /v1.
type API struct {
	o      Options
	routes []string
	rules  []string // each route's access rule (RouteRules)
	mux    *http.ServeMux

	// The bulk cancels started here run under jobsCtx; Close ends it and
	// waits for them.
	jobsCtx  context.Context
	stopJobs context.CancelFunc
	jobs     sync.WaitGroup

	profiles profiles // the due-time profiles, shared by this instance's viewers
}

//go:embed openapi.json
var openAPI []byte

// New returns the API; Handler serves it.
func New(o Options) *API {
	if o.MaxBody <= 0 {
		o.MaxBody = shard.DefaultMaxBody
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	a := &API{o: o, mux: http.NewServeMux()}
	a.jobsCtx, a.stopJobs = context.WithCancel(context.Background())
	a.handle("POST /v1/messages", inBody(RoleProduce), a.enqueue)
	a.handle("POST /v1/messages/batch", inBody(RoleProduce), a.enqueueBatch)
	a.handle("GET /v1/messages/{id}", onMessage(RoleRead), a.get)
	a.handle("DELETE /v1/messages/{id}", onMessage(RoleProduce), a.cancel)
	a.handle("POST /v1/messages/{id}/reschedule", onMessage(RoleProduce), a.reschedule)
	a.handle("GET /v1/stats", anywhere(RoleRead), a.stats)
	a.handle("GET /v1/stats/due-profile", anywhere(RoleRead), a.dueProfile)
	a.handle("GET /v1/stats/rates", anywhere(RoleRead), a.rates)
	a.handle("GET /v1/shards", anywhere(RoleRead), a.shards)
	a.handle("PUT /v1/shards", inNamespace(RoleAdmin), a.setShards)
	a.handle("GET /v1/dead", listed(RoleRead), a.deadList)
	a.handle("POST /v1/dead/{id}/redrive", onMessage(RoleOperate), a.redriveOne)
	a.handle("DELETE /v1/dead/{id}", onMessage(RoleOperate), a.purgeOne)
	a.handle("POST /v1/dead/redrive", inBody(RoleOperate), a.redriveMany)
	a.handle("POST /v1/dead/purge", inBody(RoleOperate), a.purgeMany)
	a.handle("POST /v1/bulk/cancel", inBody(RoleOperate), func(w http.ResponseWriter, r *http.Request) { a.bulk(w, r, "cancel") })
	a.handle("POST /v1/bulk/reschedule", inBody(RoleOperate), func(w http.ResponseWriter, r *http.Request) { a.bulk(w, r, "reschedule") })
	a.handle("GET /v1/bulk/{job}", listed(RoleRead), a.bulkStatus)
	a.handle("GET /v1/far", anywhere(RoleRead), a.far)
	a.handle("PUT /v1/far", inNamespace(RoleAdmin), a.setFar)
	a.handle("GET /v1/quotas", listed(RoleRead), a.quotas)
	a.handle("PUT /v1/quotas/{scope}", inNamespace(RoleAdmin), a.putQuota)
	a.handle("DELETE /v1/quotas/{scope}", inNamespace(RoleAdmin), a.deleteQuota)
	a.handle("GET /v1/classes", listed(RoleRead), a.classes)
	a.handle("PUT /v1/classes/{name}", inNamespace(RoleAdmin), a.putClass)
	a.handle("DELETE /v1/classes/{name}", inNamespace(RoleAdmin), a.deleteClass)
	a.handle("GET /v1/flows", listed(RoleRead), a.flows)
	a.handle("PUT /v1/flows/{topic}", onTopic(RoleOperate), a.changeFlowHandler("limit"))
	a.handle("POST /v1/flows/{topic}/pause", onTopic(RoleOperate), a.changeFlowHandler("pause"))
	a.handle("POST /v1/flows/{topic}/resume", onTopic(RoleOperate), a.changeFlowHandler("resume"))
	a.handle("GET /v1/schedules", listed(RoleRead), a.schedules)
	a.handle("GET /v1/schedules/{name}", onSchedule(RoleRead), a.getSchedule)
	a.handle("PUT /v1/schedules/{name}", onSchedule(RoleOperate), a.putSchedule)
	a.handle("DELETE /v1/schedules/{name}", onSchedule(RoleOperate), a.changeScheduleHandler("delete"))
	a.handle("POST /v1/schedules/{name}/pause", onSchedule(RoleOperate), a.changeScheduleHandler("pause"))
	a.handle("POST /v1/schedules/{name}/resume", onSchedule(RoleOperate), a.changeScheduleHandler("resume"))
	a.handle("GET /v1/schedules/{name}/preview", onSchedule(RoleRead), a.previewSchedule)
	a.handle("GET /v1/export", inNamespace(RoleRead), a.export)
	a.handle("GET /v1/openapi.json", public(), func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	a.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "no such endpoint", r.Method+" "+r.URL.Path+" (see /v1/openapi.json)", "")
	})
	return a
}

// Handler serves the API.
func (a *API) Handler() http.Handler { return a.mux }

// Routes lists the routes as "METHOD /path", for the OpenAPI test.
func (a *API) Routes() []string { return a.routes }

// RouteRules gives each route's access rule as "role/where" (access.go),
// which the OpenAPI document states as x-delayq-role and x-delayq-scope.
func (a *API) RouteRules() map[string]string {
	m := make(map[string]string, len(a.routes))
	for j, r := range a.routes {
		m[r] = a.rules[j]
	}
	return m
}

// handle registers h for pattern, behind rule (access.go).
func (a *API) handle(pattern string, rule access, h http.HandlerFunc) {
	a.routes = append(a.routes, pattern)
	a.rules = append(a.rules, rule.String())
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store") // answers carry message bodies
		if rule.on != onNobody {
			c := a.o.Tokens.Caller(bearer(r))
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
			if !a.check(w, r, rule, c) {
				return
			}
		}
		h(w, r)
	})
}

// audit logs a change made through the API (Audit).
func (a *API) audit(r *http.Request, action, target string, err error) {
	Audit(a.o.Log, "api", holderOf(r), action, target, err)
}

// Audit logs an action that changed something, or tried to, as one
// "audit" line: through what (api, console), who (the token's holder,
// never the token), what, on what, and how it ended (ok, or the error).
func Audit(log *zap.Logger, via, who, action, target string, err error) {
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	log.Info("audit", zap.String("via", via), zap.String("who", who), zap.String("action", action),
		zap.String("target", target), zap.String("result", result))
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Field  string `json:"field,omitempty"` // the input field that is wrong
}

func problem(w http.ResponseWriter, status int, title, detail, field string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Field: field})
}

// fail maps an error of the shard package to a problem.
func (a *API) fail(w http.ResponseWriter, err error) {
	var ie *shard.InvalidError
	var qe *shard.QuotaError
	switch {
	case errors.As(err, &ie):
		problem(w, http.StatusBadRequest, "invalid "+ie.Field, ie.Reason, ie.Field)
	case errors.As(err, &qe):
		overQuota(w, qe)
	case errors.Is(err, shard.ErrCorruptQuota):
		problem(w, http.StatusInternalServerError, "corrupt quota", err.Error(), "")
	case errors.Is(err, shard.ErrDuplicate):
		problem(w, http.StatusConflict, "duplicate id", err.Error(), "id")
	case errors.Is(err, shard.ErrCancelled):
		problem(w, http.StatusConflict, "cancelled", err.Error(), "id")
	case errors.Is(err, shard.ErrInFlight):
		problem(w, http.StatusConflict, "in flight", err.Error(), "id")
	case errors.Is(err, shard.ErrNotFound):
		problem(w, http.StatusNotFound, "not found", err.Error(), "id")
	case errors.Is(err, shard.ErrRedisFull):
		// 503, not 507: the state is passing (deliveries free memory),
		// and every client retries a 503 with Retry-After.
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusServiceUnavailable, "Redis is full", err.Error(), "")
	case errors.Is(err, shard.ErrCapacity), errors.Is(err, shard.ErrNotReplicated):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "try again", err.Error(), "")
	default:
		a.o.Log.Warn("request failed", zap.Error(err))
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Redis unavailable", err.Error(), "")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readBody reads a JSON request body of at most limit bytes; it writes
// the problem and returns nil when the body is not that.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) []byte {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "want application/json",
			fmt.Sprintf("Content-Type is %q", r.Header.Get("Content-Type")), "")
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("more than %d bytes", limit), "")
		return nil
	case err != nil:
		problem(w, http.StatusBadRequest, "unreadable body", err.Error(), "")
		return nil
	}
	return b
}

// decodeStrict decodes one JSON object into v, refusing unknown fields
// and trailing data.
func decodeStrict(w http.ResponseWriter, b []byte, v any) bool {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		err = shard.JSONError(err)
		var ie *shard.InvalidError
		if errors.As(err, &ie) {
			problem(w, http.StatusBadRequest, "invalid "+ie.Field, ie.Reason, ie.Field)
			return false
		}
		problem(w, http.StatusBadRequest, "invalid JSON", err.Error(), "")
		return false
	}
	if dec.More() {
		problem(w, http.StatusBadRequest, "invalid JSON", "more than one value", "")
		return false
	}
	return true
}

// messageLimit is the largest body of a request holding one message.
func (a *API) messageLimit() int64 { return int64(a.o.MaxBody)*4/3 + 64<<10 }

// Scheduled is the answer to an enqueue.
type Scheduled struct {
	ID    string `json:"id"`
	Shard int    `json:"shard"`
	Due   string `json:"due"`
}

func (a *API) enqueue(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, a.messageLimit())
	if b == nil {
		return
	}
	m, err := shard.ParseLine(b)
	if err != nil {
		a.badMessage(w, err)
		return
	}
	if !mayWrite(w, r, RoleProduce, m) {
		return
	}
	s, err := a.o.Producer.Enqueue(tracing.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), m)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, Scheduled{ID: s.ID, Shard: s.Shard, Due: s.Due.UTC().Format(time.RFC3339Nano)})
}

// badMessage reports a message that does not parse: a rule of the
// message names its field; anything else is the JSON.
func (a *API) badMessage(w http.ResponseWriter, err error) {
	var ie *shard.InvalidError
	if errors.As(err, &ie) {
		problem(w, http.StatusBadRequest, "invalid "+ie.Field, ie.Reason, ie.Field)
		return
	}
	problem(w, http.StatusBadRequest, "invalid message", err.Error(), "")
}

// BatchItem is the outcome of one message of a batch.
type BatchItem struct {
	ID string `json:"id,omitempty"`
	// scheduled, duplicate, cancelled, invalid, forbidden (outside the
	// token's scopes), over_quota (the scope's quota refused it: retry
	// later), failed
	Status string `json:"status"`
	Shard  *int   `json:"shard,omitempty"`
	Due    string `json:"due,omitempty"`
	Error  string `json:"error,omitempty"`
	Field  string `json:"field,omitempty"`
}

// DecodeBatch reads a batch request, {"messages": [ … ]} with each
// message in the JSON lines form: the messages that parse, the index of
// each in the request, and an item for each that does not.
func DecodeBatch(b []byte) (msgs []shard.Message, index []int, items []BatchItem, err error) {
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, nil, nil, shard.JSONError(err)
	}
	if dec.More() {
		return nil, nil, nil, errors.New("invalid JSON: more than one value")
	}
	if len(req.Messages) == 0 || len(req.Messages) > MaxBatch {
		return nil, nil, nil, fmt.Errorf("messages: %d, want 1 to %d", len(req.Messages), MaxBatch)
	}
	items = make([]BatchItem, len(req.Messages))
	for i, raw := range req.Messages {
		m, err := shard.ParseLine(raw)
		if err == nil && m.Dead != nil {
			err = &shard.InvalidError{Field: "dead", Reason: "dead messages are restored by an operator's delayq enqueue -f, not over HTTP"}
		}
		if err != nil {
			// The id, if it can be read at all, says which message it was.
			var probe struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(raw, &probe) // best effort: the error is err
			items[i] = BatchItem{ID: probe.ID, Status: "invalid", Error: err.Error()}
			var ie *shard.InvalidError
			if errors.As(err, &ie) {
				items[i].Field = ie.Field
			}
			continue
		}
		msgs, index = append(msgs, m), append(index, i)
	}
	return msgs, index, items, nil
}

func (a *API) enqueueBatch(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, int64(MaxBatch)*a.messageLimit())
	if b == nil {
		return
	}
	msgs, index, items, err := DecodeBatch(b)
	if err != nil {
		field := "messages"
		var ie *shard.InvalidError
		if errors.As(err, &ie) {
			field = ie.Field
		}
		problem(w, http.StatusBadRequest, "invalid batch", err.Error(), field)
		return
	}
	// Messages outside the caller's scopes are answered "forbidden" and
	// not sent.
	c := callerOf(r)
	kept, keptIndex := msgs[:0:0], index[:0:0]
	for j, m := range msgs {
		if c.Can(RoleProduce, targetOfMessage(m)) {
			kept, keptIndex = append(kept, m), append(keptIndex, index[j])
			continue
		}
		items[index[j]] = BatchItem{ID: m.ID, Status: "forbidden", Error: outsideWhy(c, RoleProduce, m), Field: fieldOutside(c, RoleProduce, m)}
	}
	msgs, index = kept, keptIndex
	if len(msgs) > 0 {
		res, _ := a.o.Producer.EnqueueBatch(tracing.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), msgs)
		for j, br := range res {
			it := &items[index[j]]
			it.ID = br.ID
			var ie *shard.InvalidError
			switch {
			case br.Err == nil:
				sh := br.Shard
				it.Status, it.Shard, it.Due = "scheduled", &sh, br.Due.UTC().Format(time.RFC3339Nano)
			case errors.Is(br.Err, shard.ErrDuplicate):
				it.Status = "duplicate"
			case errors.Is(br.Err, shard.ErrCancelled):
				it.Status, it.Error = "cancelled", br.Err.Error()
			case errors.Is(br.Err, shard.ErrQuota):
				it.Status, it.Error, it.Field = "over_quota", br.Err.Error(), "quota"
			case errors.As(br.Err, &ie):
				it.Status, it.Error, it.Field = "invalid", br.Err.Error(), ie.Field
			default:
				it.Status, it.Error = "failed", br.Err.Error()
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": items})
}

// Message is a message as GET /v1/messages/{id} shows it.
type Message struct {
	ID        string      `json:"id"`
	State     shard.State `json:"state"`
	Shard     int         `json:"shard"`
	At        string      `json:"at,omitempty"` // due, lease deadline or dead since, by state
	Scheduled string      `json:"scheduled,omitempty"`
	// Far: it waits in the far-future tier (GET /v1/far).
	Far bool `json:"far,omitempty"`
	// ExpiresAt and MaxLatenessMs are the message's deadline, if any.
	ExpiresAt     string         `json:"expires_at,omitempty"`
	MaxLatenessMs int64          `json:"max_lateness_ms,omitempty"`
	Attempts      int            `json:"attempts"`
	Reason        string         `json:"reason,omitempty"`
	Topic         string         `json:"topic,omitempty"`
	Exchange      string         `json:"exchange,omitempty"`
	RoutingKey    string         `json:"routing_key,omitempty"`
	ContentType   string         `json:"content_type,omitempty"`
	Properties    map[string]any `json:"properties,omitempty"`
	Headers       map[string]any `json:"headers,omitempty"` // typed: see shard.ParseJSONValue
	Body          *string        `json:"body,omitempty"`    // when it is UTF-8 text
	BodyBase64    *string        `json:"body_base64,omitempty"`
	Corrupt       string         `json:"corrupt,omitempty"`
}

// MessageOf renders what Inspect found.
func MessageOf(info shard.Info) Message {
	v := Message{ID: info.ID, State: info.State, Shard: info.Shard, Attempts: info.Attempts, Reason: info.Reason, Far: info.Far}
	if !info.At.IsZero() {
		v.At = info.At.UTC().Format(time.RFC3339Nano)
	}
	if !info.Scheduled.IsZero() {
		v.Scheduled = info.Scheduled.UTC().Format(time.RFC3339Nano)
	}
	if e := info.Envelope; e != nil {
		v.Topic, v.Exchange, v.RoutingKey, v.ContentType = e.Topic, e.Exchange, e.RoutingKey, e.ContentType
		if e.ExpiresMs > 0 {
			v.ExpiresAt = time.UnixMilli(e.ExpiresMs).UTC().Format(time.RFC3339Nano)
		}
		v.MaxLatenessMs = e.MaxLatenessMs
		v.Properties = PropertiesOf(e.Properties)
		if len(e.Headers) > 0 {
			v.Headers = map[string]any{}
			for _, h := range e.Headers {
				v.Headers[h.Key] = shard.JSONValue(h.Value)
			}
		}
		if utf8.Valid(e.Body) {
			s := string(e.Body)
			v.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(e.Body)
			v.BodyBase64 = &s
		}
	}
	if info.Corrupt != nil {
		v.Corrupt = info.Corrupt.Error()
	}
	return v
}

// PropertiesOf lists the AMQP properties that are set, with the names of
// the JSON lines form; nil when none is.
func PropertiesOf(p shard.Properties) map[string]any {
	out := map[string]any{}
	for k, v := range map[string]string{"content_encoding": p.ContentEncoding, "correlation_id": p.CorrelationID,
		"reply_to": p.ReplyTo, "expiration": p.Expiration, "type": p.Type, "app_id": p.AppID} {
		if v != "" {
			out[k] = v
		}
	}
	if p.Priority != 0 {
		out["priority"] = p.Priority
	}
	if p.DeliveryMode != 0 {
		out["delivery_mode"] = p.DeliveryMode
	}
	if !p.Timestamp.IsZero() {
		out["timestamp"] = p.Timestamp.Unix()
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// pathID returns the {id} of the path, checked.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := shard.ValidateID(id); err != nil {
		var ie *shard.InvalidError
		if errors.As(err, &ie) {
			problem(w, http.StatusBadRequest, "invalid id", ie.Reason, "id")
		}
		return "", false
	}
	return id, true
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	info, err := a.o.Producer.Inspect(r.Context(), id)
	if err != nil {
		a.fail(w, err)
		return
	}
	if info.State == shard.StateUnknown {
		problem(w, http.StatusNotFound, "unknown id", fmt.Sprintf("%q is not scheduled, in flight or dead", id), "id")
		return
	}
	writeJSON(w, http.StatusOK, MessageOf(info))
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	err := a.o.Producer.Cancel(r.Context(), id)
	a.audit(r, "cancel", id, err)
	if err != nil {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) reschedule(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	b := readBody(w, r, 4<<10)
	if b == nil {
		return
	}
	var req struct {
		DelayMs *int64 `json:"delay_ms"`
		AtMs    *int64 `json:"at_ms"`
	}
	if !decodeStrict(w, b, &req) {
		return
	}
	var due time.Time
	var err error
	switch {
	case (req.DelayMs == nil) == (req.AtMs == nil):
		problem(w, http.StatusBadRequest, "invalid delay_ms", "give delay_ms or at_ms", "delay_ms")
		return
	case req.DelayMs != nil:
		if *req.DelayMs < 0 || *req.DelayMs > shard.MaxDelay.Milliseconds() {
			problem(w, http.StatusBadRequest, "invalid delay_ms", fmt.Sprintf("%d is outside [0, %d]", *req.DelayMs,
				shard.MaxDelay.Milliseconds()), "delay_ms")
			return
		}
		due, err = a.o.Producer.RescheduleAfter(r.Context(), id, time.Duration(*req.DelayMs)*time.Millisecond)
	default:
		due, err = a.o.Producer.Reschedule(r.Context(), id, time.UnixMilli(*req.AtMs))
	}
	a.audit(r, "reschedule", id, err)
	var ie *shard.InvalidError
	if errors.As(err, &ie) && (ie.Field == "at" || ie.Field == "delay") {
		// The SDK's names; this request's are at_ms and delay_ms.
		err = &shard.InvalidError{Field: ie.Field + "_ms", Reason: ie.Reason}
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "due": due.UTC().Format(time.RFC3339Nano)})
}

// ShardStats is one shard's counts.
type ShardStats struct {
	Shard            int     `json:"shard"`
	Node             string  `json:"node,omitempty"` // the Redis Cluster master holding the shard
	Scheduled        int64   `json:"scheduled"`
	DueNow           int64   `json:"due_now"`
	InFlight         int64   `json:"in_flight"`
	Dead             int64   `json:"dead"`
	Far              int64   `json:"far,omitempty"` // scheduled, waiting in the far-future tier (not in Scheduled)
	NextDue          string  `json:"next_due,omitempty"`
	OldestOverdueSec float64 `json:"oldest_overdue_seconds"`
}

// Stats are the counts of every shard and their total (Shard -1), and the
// Redis masters that hold them.
type Stats struct {
	Namespace string       `json:"namespace"`
	Shards    []ShardStats `json:"shards"`
	Total     ShardStats   `json:"total"`
	Redis     []RedisStats `json:"redis,omitempty"`
	// Flows are the topics under flow control, with what each holds back
	// (held messages are not in the shards' due counts).
	Flows []Flow `json:"flows,omitempty"`
	// Classes are the release classes with their backlogs (none when no
	// class was ever set).
	Classes []Class `json:"classes,omitempty"`
	// Rates are the fleet's rates over the last 15 minutes.
	Rates *Rates `json:"rates,omitempty"`
}

// RedisStats is what decides whether a Redis master can take more
// messages or lose some (shard.RedisServer).
type RedisStats struct {
	Master string `json:"master"`
	// Policy is maxmemory-policy; empty when INFO was refused.
	Policy     string `json:"maxmemory_policy,omitempty"`
	UsedMemory int64  `json:"used_memory"`
	MaxMemory  int64  `json:"maxmemory"` // 0: no limit
	// Full: used_memory reached maxmemory and the policy evicts nothing,
	// so Redis refuses new messages until deliveries free memory.
	Full           bool   `json:"full"`
	EvictsMessages bool   `json:"evicts_messages"`
	Persistence    string `json:"persistence"` // shard.RedisServer.Persistence
}

// Memory says used_memory against maxmemory for people: "4.9 MB of 5.0
// MB (98 %)", or "4.9 MB, no limit".
func (r RedisStats) Memory() string {
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }
	if r.MaxMemory <= 0 {
		return mb(r.UsedMemory) + ", no limit"
	}
	return fmt.Sprintf("%s of %s (%.0f %%)", mb(r.UsedMemory), mb(r.MaxMemory), 100*float64(r.UsedMemory)/float64(r.MaxMemory))
}

// Status is "full", "unsafe" (the policy can evict messages) or "ok".
func (r RedisStats) Status() string {
	switch {
	case r.Full:
		return "full"
	case r.EvictsMessages:
		return "unsafe"
	}
	return "ok"
}

// RedisStatsOf renders what Store.RedisServers read.
func RedisStatsOf(servers []shard.RedisServer) []RedisStats {
	out := make([]RedisStats, len(servers))
	for i, r := range servers {
		out[i] = RedisStats{Master: r.Addr, Policy: r.Policy, UsedMemory: r.UsedMemory, MaxMemory: r.MaxMemory,
			Full:           r.Policy == "noeviction" && r.MaxMemory > 0 && r.UsedMemory >= r.MaxMemory,
			EvictsMessages: r.EvictsMessages(), Persistence: r.Persistence()}
	}
	return out
}

// ReadStats counts every shard (one pipelined round trip) and reads the
// masters' memory and settings (INFO and CONFIG GET on each).
func (a *API) ReadStats(ctx context.Context) (Stats, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return Stats{}, err
	}
	all, err := a.o.Store.Stats(ctx, n)
	if err != nil {
		return Stats{}, err
	}
	v := Summarize(a.o.Store.Namespace(), all)
	servers, err := a.o.Store.RedisServers(ctx)
	if err != nil {
		return Stats{}, err
	}
	v.Redis = RedisStatsOf(servers)
	if v.Flows, err = a.ReadFlows(ctx); err != nil {
		return Stats{}, err
	}
	if v.Classes, err = a.ReadClasses(ctx); err != nil {
		return Stats{}, err
	}
	rates, err := a.ReadRates(ctx, DefaultRatesWindow)
	if err != nil {
		return Stats{}, err
	}
	v.Rates = &rates
	return v, nil
}

// Summarize turns the counts of the shards into Stats with their total.
func Summarize(ns string, all []shard.Stats) Stats {
	v := Stats{Namespace: ns, Total: ShardStats{Shard: -1}}
	var next int64 = -1
	for _, s := range all {
		row := ShardStats{Shard: s.Shard, Scheduled: s.Scheduled, DueNow: s.DueNow, InFlight: s.InFlight, Dead: s.Dead, Far: s.Far,
			OldestOverdueSec: s.OldestOverdue().Seconds()}
		if s.HeadMs >= 0 {
			row.NextDue = time.UnixMilli(s.HeadMs).UTC().Format(time.RFC3339Nano)
			if next < 0 || s.HeadMs < next {
				next = s.HeadMs
			}
		}
		v.Shards = append(v.Shards, row)
		t := &v.Total
		t.Scheduled += row.Scheduled
		t.DueNow += row.DueNow
		t.InFlight += row.InFlight
		t.Dead += row.Dead
		t.Far += row.Far
		t.OldestOverdueSec = max(t.OldestOverdueSec, row.OldestOverdueSec)
	}
	if next >= 0 {
		v.Total.NextDue = time.UnixMilli(next).UTC().Format(time.RFC3339Nano)
	}
	return v
}

func (a *API) stats(w http.ResponseWriter, r *http.Request) {
	// The counts name no message (anywhere's rule); flows name topics:
	// a scoped caller sees its own.
	v, err := a.ReadStatsFor(r.Context(), callerOf(r))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (a *API) shards(w http.ResponseWriter, r *http.Request) {
	n, err := a.o.Shards(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	lay, err := a.o.Store.ReadLayout(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"shards": n, "high_water": lay.HighWater, "used": lay.Used})
}

func (a *API) setShards(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, 4<<10)
	if b == nil {
		return
	}
	var req struct {
		M      int `json:"m"`
		Expect int `json:"expect"`
	}
	if !decodeStrict(w, b, &req) {
		return
	}
	if a.o.SetShards == nil {
		problem(w, http.StatusConflict, "M cannot be set here", ErrShardsStatic.Error(), "m")
		return
	}
	from, err := a.o.SetShards(r.Context(), req.M, req.Expect)
	a.audit(r, "set shards", fmt.Sprintf("M %d (expected %d)", req.M, req.Expect), err)
	switch {
	case errors.Is(err, ErrShardsStatic):
		problem(w, http.StatusConflict, "M cannot be set here", err.Error(), "m")
	case errors.Is(err, ErrShardsChanged):
		problem(w, http.StatusConflict, "M changed meanwhile", fmt.Sprintf("M is %d now; check and send again", from), "expect")
	case err != nil:
		a.fail(w, err)
	default:
		writeJSON(w, http.StatusOK, map[string]int{"from": from, "to": req.M})
	}
}

// DeadMessage is one entry of the dead list.
type DeadMessage struct {
	ID     string `json:"id"`
	Shard  int    `json:"shard"`
	Since  string `json:"since"`
	Reason string `json:"reason"`
}

// DeadPage is a page of the dead list.
type DeadPage struct {
	Dead []DeadMessage `json:"dead"`
	Next string        `json:"next,omitempty"` // the after of the next page
	More bool          `json:"more"`
}

// Browse lists the scheduled messages q selects over every shard that may
// hold messages (shard.Store.Browse).
func (a *API) Browse(ctx context.Context, q shard.BrowseQuery) ([]shard.Listed, *shard.BrowseCursor, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return nil, nil, err
	}
	return a.o.Store.Browse(ctx, n, q)
}

// ReadDead lists up to limit dead messages after the cursor (""
// for the oldest), oldest first.
func (a *API) ReadDead(ctx context.Context, after string, limit int) (DeadPage, error) {
	cur, err := shard.ParseDeadCursor(after)
	if err != nil {
		return DeadPage{}, &shard.InvalidError{Field: "after", Reason: err.Error()}
	}
	n, err := a.o.Shards(ctx)
	if err != nil {
		return DeadPage{}, err
	}
	list, next, more, err := a.o.Store.DeadPage(ctx, n, cur, limit)
	if err != nil {
		return DeadPage{}, err
	}
	p := DeadPage{Dead: make([]DeadMessage, len(list)), More: more}
	if more {
		p.Next = next.String()
	}
	for i, d := range list {
		p.Dead[i] = DeadMessage{ID: d.ID, Shard: d.Shard, Since: d.Since.UTC().Format(time.RFC3339Nano), Reason: d.Reason}
	}
	return p, nil
}

func (a *API) deadList(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxDeadPage {
			problem(w, http.StatusBadRequest, "invalid limit", fmt.Sprintf("%q, want 1 to %d", s, MaxDeadPage), "limit")
			return
		}
		limit = n
	}
	page, err := a.ReadDeadFor(r.Context(), callerOf(r), r.URL.Query().Get("after"), limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (a *API) redriveOne(w http.ResponseWriter, r *http.Request) {
	a.deadOne(w, r, "redrive", a.o.Producer.Redrive)
}

func (a *API) purgeOne(w http.ResponseWriter, r *http.Request) {
	a.deadOne(w, r, "purge", a.o.Producer.Purge)
}

func (a *API) deadOne(w http.ResponseWriter, r *http.Request, action string, op func(context.Context, string) error) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	err := op(r.Context(), id)
	a.audit(r, action, id, err)
	if err != nil {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) redriveMany(w http.ResponseWriter, r *http.Request) {
	a.deadMany(w, r, "redrive", a.o.Producer.Redrive)
}

func (a *API) purgeMany(w http.ResponseWriter, r *http.Request) {
	a.deadMany(w, r, "purge", a.o.Producer.Purge)
}

// deadMany redrives or purges {"ids": [...]} or {"all": true} (the
// oldest MaxSelection dead messages; the answer says how many are left).
func (a *API) deadMany(w http.ResponseWriter, r *http.Request, action string, op func(context.Context, string) error) {
	b := readBody(w, r, 64<<10+int64(MaxSelection)*(shard.MaxIDLen+8))
	if b == nil {
		return
	}
	var req struct {
		IDs []string `json:"ids"`
		All bool     `json:"all"`
	}
	if !decodeStrict(w, b, &req) {
		return
	}
	switch {
	case req.All == (len(req.IDs) > 0):
		problem(w, http.StatusBadRequest, "invalid selection", `give "ids" or "all": true`, "ids")
		return
	case len(req.IDs) > MaxSelection:
		problem(w, http.StatusBadRequest, "invalid ids", fmt.Sprintf("%d ids, at most %d", len(req.IDs), MaxSelection), "ids")
		return
	}
	for i, id := range req.IDs {
		if err := shard.ValidateID(id); err != nil {
			problem(w, http.StatusBadRequest, "invalid id", err.Error(), fmt.Sprintf("ids[%d]", i))
			return
		}
	}
	if req.All {
		page, err := a.ReadDead(r.Context(), "", MaxSelection)
		if err != nil {
			a.fail(w, err)
			return
		}
		for _, d := range page.Dead {
			req.IDs = append(req.IDs, d.ID)
		}
	}
	done, missing := 0, 0
	c := callerOf(r)
	for _, id := range req.IDs {
		may, err := a.MayAddress(r.Context(), c, RoleOperate, id)
		switch {
		case err != nil:
		case !may:
			err = shard.ErrNotFound // outside the caller's scopes: to it, not there
		default:
			err = op(r.Context(), id)
		}
		switch {
		case err == nil:
			done++
		case errors.Is(err, shard.ErrNotFound):
			missing++
		default:
			a.audit(r, action, fmt.Sprintf("%d dead messages", len(req.IDs)), fmt.Errorf("%d done, then %s: %w", done, id, err))
			a.fail(w, err)
			return
		}
	}
	target := fmt.Sprintf("%d ids", len(req.IDs))
	if req.All {
		target = fmt.Sprintf("all (the oldest %d)", len(req.IDs))
	}
	a.audit(r, action, fmt.Sprintf("%s: %d done, %d not dead", target, done, missing), nil)
	out := map[string]int{"done": done, "not_dead": missing}
	if req.All {
		// How many remain (the caller repeats while some do). The work is
		// done either way: a failed count is left out, not an error.
		if st, err := a.ReadStats(r.Context()); err == nil {
			out["dead_left"] = int(st.Total.Dead)
		} else {
			a.o.Log.Warn("count the dead messages left", zap.Error(err))
		}
	}
	writeJSON(w, http.StatusOK, out)
}
