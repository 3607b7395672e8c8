package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/scope"
)

//go:embed templates/*.html static/*
var files embed.FS

// Options configure a Console.
type Options struct {
	API      *httpapi.API
	Producer *shard.Producer
	Tokens   *httpapi.Tokens // nil: no sign-in, every visitor is an admin
	// Fleet, when set, lists the live scanners (from Consul) for the
	// overview.
	Fleet func(ctx context.Context) ([]string, error)
	// Secure marks the cookies Secure (the server speaks TLS).
	Secure bool
	// Key signs sessions and form tokens. Servers given the same key
	// accept each other's sessions and forms (several serve instances
	// behind a balancer, or one restarted): serve derives it from the
	// tokens file, or reads DELAYQ_HTTP_SECRET_FILE. Nil: a random key of
	// this process.
	Key []byte
	// Sessions records sign-outs where every instance sees them
	// (*shard.Store). Nil: a sign-out only clears the browser's cookie,
	// and a copy of the cookie lives until it expires.
	Sessions Sessions
	// SessionTTL is how long a sign-in lasts. Default 12h.
	SessionTTL time.Duration
	Log        *zap.Logger
}

// Sessions is where sign-outs are kept (*shard.Store).
type Sessions interface {
	EndSession(ctx context.Context, id string, until time.Time) error
	SessionEnded(ctx context.Context, id string) (bool, error)
}

// Console serves the web pages.
type Console struct {
	o       Options
	tmpl    *template.Template
	key     []byte
	holders map[string]holder // token fingerprint under key -> its grants and holder
	mux     *http.ServeMux
	routes  []string
}

type holder struct {
	who scope.Caller
}

// The console's cookies: the session, and the sign-in form's nonce.
const (
	sessionCookie = "delayq_session"
	loginCookie   = "delayq_login"
)

// New parses the templates and returns the console.
func New(o Options) (*Console, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{
		"dur": func(sec float64) string {
			return (time.Duration(sec * float64(time.Second))).Round(time.Millisecond).String()
		},
		"when":   func(t any) timeView { return timeOf(t, "ago") },
		"due":    func(t any) timeView { return timeOf(t, "overdue") },
		"plural": plural,
		"msSec":  func(ms int64) float64 { return float64(ms) / 1000 },
		"args":   func(v ...any) []any { return v }, // several values for a {{template}}
		"sub":    func(a, b int) int { return a - b },
	}).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	key := o.Key
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
	}
	c := &Console{o: o, tmpl: tmpl, key: key, holders: map[string]holder{}, mux: http.NewServeMux()}
	o.Tokens.Each(key, func(fp string, who scope.Caller) { c.holders[fp] = holder{who} })
	static, _ := fs.Sub(files, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.handle("GET /login", c.loginPage)
	c.handle("POST /login", c.login)
	c.handle("POST /logout", c.page(httpapi.RoleRead, c.logout))
	c.handle("GET /{$}", c.page(httpapi.RoleRead, c.overview))
	c.handle("GET /ui/stats", c.page(httpapi.RoleRead, c.statsJSON))
	c.handle("GET /messages", c.page(httpapi.RoleRead, c.message))
	c.handle("GET /scheduled", c.page(httpapi.RoleRead, c.scheduled))
	c.handle("POST /messages/cancel", c.page(httpapi.RoleProduce, c.cancel))
	c.handle("POST /messages/reschedule", c.page(httpapi.RoleProduce, c.reschedule))
	c.handle("POST /scheduled/cancel", c.page(httpapi.RoleOperate, c.bulkCancel))
	c.handle("POST /scheduled/reschedule", c.page(httpapi.RoleOperate, c.bulkReschedule))
	c.handle("GET /bulk", c.page(httpapi.RoleRead, c.bulk))
	c.handle("GET /dead", c.page(httpapi.RoleRead, c.dead))
	c.handle("POST /dead", c.page(httpapi.RoleOperate, c.deadAction))
	c.handle("GET /flows", c.page(httpapi.RoleRead, c.flows))
	c.handle("POST /flows", c.page(httpapi.RoleOperate, c.flowAction))
	c.handle("GET /far", c.page(httpapi.RoleRead, c.farPage))
	c.handle("POST /far", c.page(httpapi.RoleAdmin, c.farAction))
	c.handle("GET /classes", c.page(httpapi.RoleRead, c.classesPage))
	c.handle("POST /classes", c.page(httpapi.RoleAdmin, c.classAction))
	c.handle("GET /quotas", c.page(httpapi.RoleRead, c.quotasPage))
	c.handle("POST /quotas", c.page(httpapi.RoleAdmin, c.quotaAction))
	c.handle("GET /schedules", c.page(httpapi.RoleRead, c.schedules))
	c.handle("POST /schedules", c.page(httpapi.RoleOperate, c.scheduleAction))
	c.handle("GET /export", c.page(httpapi.RoleRead, c.exportPage))
	c.handle("GET /export/{kind}", c.page(httpapi.RoleRead, c.exportDownload))
	return c, nil
}

// Handler serves the console.
func (c *Console) Handler() http.Handler { return c.mux }

// handle registers h for pattern.
func (c *Console) handle(pattern string, h http.HandlerFunc) {
	c.routes = append(c.routes, pattern)
	c.mux.HandleFunc(pattern, h)
}

// Routes lists the pages and actions, as "METHOD /path", for the tests
// that must cover each.
func (c *Console) Routes() []string { return c.routes }

// session is who is looking at a page.
type session struct {
	Role   httpapi.Role // the highest of its grants: what it may do somewhere
	Caller scope.Caller // its grants: what it may do where (each action checks them)
	Name   string       // the token's holder (tokens file), for the audit log
	CSRF   string
	Login  bool      // signed in with a token (so a sign-out makes sense)
	ID     string    // of a sign-in
	Until  time.Time // when the sign-in expires
}

// Grants is what the page header says the session may do: its role, or
// for a token limited to scopes each grant (operate@search).
func (s session) Grants() string {
	if !s.Caller.Scoped() {
		return s.Role.String()
	}
	return s.Caller.String()
}

// May reports whether the session holds role (a role's name: read,
// produce, operate, admin), for the templates' buttons.
func (s session) May(role string) bool {
	r, err := scope.ParseRole(role)
	return err == nil && s.Role >= r
}

// page wraps h: it needs a session of at least role (else the sign-in
// page, or 403), and for a POST a valid CSRF token.
func (c *Console) page(role httpapi.Role, h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		if err != nil {
			c.o.Log.Warn("session check failed", zap.Error(err))
			c.render(w, http.StatusServiceUnavailable, "error.html", map[string]any{"Title": "Unavailable",
				"Error": "Cannot check the sign-in: " + err.Error()})
			return
		}
		if s.Role == httpapi.RoleNone {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/ui/") {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if s.Role < role {
			c.render(w, http.StatusForbidden, "error.html", map[string]any{"S": s, "Title": "Not allowed",
				"Error": fmt.Sprintf("This needs the %s role; your token holds %s.", role, s.Role)})
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 256<<10)
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad form", http.StatusBadRequest)
				return
			}
			if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) {
				http.Error(w, "stale or missing form token: reload the page", http.StatusForbidden)
				return
			}
		}
		h(w, r, s)
	}
}

// session reads the session cookie: "ID.UNTIL.FINGERPRINT.MAC", MAC an
// HMAC under the key of the rest, FINGERPRINT the token's (Tokens.Each),
// so the cookie carries no token, a session dies with its token, and
// any server with the key accepts it unless Sessions says it ended.
func (c *Console) session(r *http.Request) (session, error) {
	if c.o.Tokens == nil {
		return session{Role: httpapi.RoleAdmin, Caller: scope.Everyone("local"), Name: "local", CSRF: c.mac("csrf:local")}, nil
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, nil
	}
	f := strings.Split(ck.Value, ".")
	if len(f) != 4 || !hmac.Equal([]byte(f[3]), []byte(c.mac("session:"+f[0]+"."+f[1]+"."+f[2]))) {
		return session{}, nil
	}
	until, err := strconv.ParseInt(f[1], 10, 64)
	h, ok := c.holders[f[2]]
	if err != nil || !ok || time.Now().Unix() >= until {
		return session{}, nil
	}
	if c.o.Sessions != nil {
		ended, err := c.o.Sessions.SessionEnded(r.Context(), f[0])
		if err != nil {
			return session{}, err
		}
		if ended {
			return session{}, nil
		}
	}
	return session{Role: h.who.Max(), Caller: h.who, Name: httpapi.AuditName(h.who), CSRF: c.mac("csrf:" + f[0]), Login: true, ID: f[0],
		Until: time.Unix(until, 0)}, nil
}

// mayAddress is nil when session s may act with role on message id; for
// a message outside its scopes it is the error an unknown id gets
// (ErrNotFound), so the page tells nothing of another scope's ids; or the
// error of the read that would tell.
func (c *Console) mayAddress(ctx context.Context, s session, role httpapi.Role, id string) error {
	may, err := c.o.API.MayAddress(ctx, s.Caller, role, id)
	if err == nil && !may {
		err = fmt.Errorf("%q: %w", id, shard.ErrNotFound)
	}
	return err
}

// mac is the hex HMAC-SHA256 of s under the console's key.
func (c *Console) mac(s string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

// audit logs a change made through the console (httpapi.Audit).
func (c *Console) audit(s session, action, target string, err error) {
	httpapi.Audit(c.o.Log, "console", s.Name, action, target, err)
}

func (c *Console) render(w http.ResponseWriter, status int, name string, data map[string]any) {
	for k, v := range map[string]any{"S": session{}, "Nav": "", "Error": "", "Done": ""} {
		if _, ok := data[k]; !ok {
			data[k] = v
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store") // pages show message bodies
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if err := c.tmpl.ExecuteTemplate(w, name, data); err != nil {
		c.o.Log.Warn("render", zap.String("page", name), zap.Error(err))
	}
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.o.Tokens == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.renderLogin(w, http.StatusOK, "")
}

// renderLogin shows the sign-in form with a fresh form token: a nonce in a
// cookie of its own and its HMAC in the form, so that a page elsewhere
// cannot sign the browser in under a token of its choosing.
func (c *Console) renderLogin(w http.ResponseWriter, status int, msg string) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: nonce, Path: "/login", HttpOnly: true, Secure: c.o.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	c.render(w, status, "login.html", map[string]any{"Title": "Sign in", "Error": msg, "LoginCSRF": c.mac("login:" + nonce)})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.o.Tokens == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	nonce, err := r.Cookie(loginCookie)
	if err != nil || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(c.mac("login:"+nonce.Value))) {
		c.renderLogin(w, http.StatusForbidden, "The sign-in form expired or came from elsewhere: sign in again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	who := c.o.Tokens.Caller(token)
	name := httpapi.AuditName(who)
	if who.Max() == httpapi.RoleNone {
		httpapi.Audit(c.o.Log, "console", "", "sign in", "", errors.New("token not accepted"))
		c.renderLogin(w, http.StatusUnauthorized, "That token is not accepted.")
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	until := strconv.FormatInt(time.Now().Add(c.o.SessionTTL).Unix(), 10)
	value := id + "." + until + "." + httpapi.Fingerprint(c.key, token)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value + "." + c.mac("session:"+value), Path: "/",
		HttpOnly: true, Secure: c.o.Secure, SameSite: http.SameSiteStrictMode, MaxAge: int(c.o.SessionTTL.Seconds())})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/login", MaxAge: -1})
	httpapi.Audit(c.o.Log, "console", name, "sign in", "", nil)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the session for every server (Options.Sessions), not only
// in this browser, so a copied cookie dies with it.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s session) {
	if s.Login && c.o.Sessions != nil {
		err := c.o.Sessions.EndSession(r.Context(), s.ID, s.Until)
		c.audit(s, "sign out", "", err)
		if err != nil {
			c.render(w, http.StatusServiceUnavailable, "error.html", map[string]any{"S": s, "Title": "Not signed out",
				"Error": "The sign-out could not be recorded: " + err.Error()})
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: c.o.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s session) {
	st, err := c.o.API.ReadStatsFor(r.Context(), s.Caller)
	data := map[string]any{"S": s, "Title": "Overview", "Nav": "overview", "Stats": st, "ShardSummary": summarizeShards(st.Shards)}
	if err != nil {
		data["Error"] = "Redis: " + err.Error()
	}
	data["Rates"], data["RatesNote"] = rateTilesOf(st.Rates)
	data["DueTopic"] = r.URL.Query().Get("topic")
	if chart, err := c.dueChartFor(r, s); err == nil {
		data["Due"] = chart
	} else {
		data["DueErr"] = err.Error()
	}
	if c.o.Fleet != nil {
		fleet, err := c.o.Fleet(r.Context())
		data["Fleet"], data["FleetErr"] = fleet, err
		data["HasFleet"] = true
	}
	c.render(w, http.StatusOK, "overview.html", data)
}

// statsJSON feeds the overview's live refresh.
func (c *Console) statsJSON(w http.ResponseWriter, r *http.Request, s session) {
	st, err := c.o.API.ReadStatsFor(r.Context(), s.Caller)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = jsonEncode(w, st)
}

func (c *Console) message(w http.ResponseWriter, r *http.Request, s session) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	data := map[string]any{"S": s, "Title": "Messages", "Nav": "messages", "ID": id, "Done": r.URL.Query().Get("done")}
	if id != "" {
		if err := shard.ValidateID(id); err != nil {
			data["Error"] = err.Error()
		} else if info, err := c.o.Producer.Inspect(r.Context(), id); err != nil {
			data["Error"] = err.Error()
		} else if may, err := c.o.API.MayAddress(r.Context(), s.Caller, httpapi.RoleRead, id); err != nil {
			data["Error"] = err.Error()
		} else if info.State == shard.StateUnknown || !may {
			data["Error"] = fmt.Sprintf("%q is not scheduled, in flight or dead (never enqueued, delivered or cancelled).", id)
		} else {
			data["M"] = httpapi.MessageOf(info)
			data["Headers"] = headerRows(info.Envelope)
		}
	}
	c.render(w, http.StatusOK, "message.html", data)
}

func (c *Console) cancel(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PostFormValue("id")
	if r.PostFormValue("confirm") != "yes" {
		c.render(w, http.StatusOK, "confirm.html", map[string]any{"S": s, "Title": "Confirm", "Nav": "messages",
			"Question": "Cancel " + id + "?", "Explain": "A cancelled message is deleted and never delivered.",
			"Post": "/messages/cancel", "Back": "/messages?id=" + url.QueryEscape(id), "Verb": "cancel", "Danger": true,
			"Fields": map[string][]string{"id": {id}}})
		return
	}
	err := c.mayAddress(r.Context(), s, httpapi.RoleProduce, id)
	if err == nil {
		err = c.o.Producer.Cancel(r.Context(), id)
	}
	c.audit(s, "cancel", id, err)
	if err != nil {
		c.render(w, statusOf(err), "error.html", map[string]any{"S": s, "Title": "Not cancelled", "Error": err.Error()})
		return
	}
	http.Redirect(w, r, "/messages?done="+url.QueryEscape("cancelled "+id), http.StatusSeeOther)
}

func (c *Console) reschedule(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PostFormValue("id")
	d, err := time.ParseDuration(strings.TrimSpace(r.PostFormValue("delay")))
	if err != nil || d < 0 || d > shard.MaxDelay {
		c.render(w, http.StatusBadRequest, "error.html", map[string]any{"S": s, "Title": "Not rescheduled",
			"Error": fmt.Sprintf("delay %q: give a duration such as 90s, 30m or 2h", r.PostFormValue("delay"))})
		return
	}
	var due time.Time
	err = c.mayAddress(r.Context(), s, httpapi.RoleProduce, id)
	if err == nil {
		due, err = c.o.Producer.RescheduleAfter(r.Context(), id, d)
	}
	c.audit(s, "reschedule", id+" in "+d.String(), err)
	if err != nil {
		c.render(w, statusOf(err), "error.html", map[string]any{"S": s, "Title": "Not rescheduled", "Error": err.Error()})
		return
	}
	http.Redirect(w, r, "/messages?id="+url.QueryEscape(id)+"&done="+url.QueryEscape("due "+due.UTC().Format(time.RFC3339)),
		http.StatusSeeOther)
}

func (c *Console) dead(w http.ResponseWriter, r *http.Request, s session) {
	limit := 100
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 && n <= httpapi.MaxDeadPage {
		limit = n
	}
	page, err := c.o.API.ReadDeadFor(r.Context(), s.Caller, r.URL.Query().Get("after"), limit)
	data := map[string]any{"S": s, "Title": "Dead messages", "Nav": "dead", "Dead": page.Dead, "Limit": limit,
		"Done": r.URL.Query().Get("done"), "Next": page.Next, "Paged": r.URL.Query().Get("after") != ""}
	if st, err := c.o.API.ReadStats(r.Context()); err == nil {
		data["Total"] = st.Total.Dead
	}
	var ie *shard.InvalidError
	switch {
	case errors.As(err, &ie):
		data["Error"] = "This page's " + ie.Field + " is not valid: " + ie.Reason
	case err != nil:
		data["Error"] = "Redis: " + err.Error()
	}
	c.render(w, http.StatusOK, "dead.html", data)
}

// deadAction redrives or purges the selected dead messages (ids, or all
// of the oldest MaxSelection), after a confirmation page.
func (c *Console) deadAction(w http.ResponseWriter, r *http.Request, s session) {
	action := r.PostFormValue("action")
	if action != "redrive" && action != "purge" {
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	all := r.PostFormValue("all") == "1"
	ids := r.PostForm["id"]
	if len(ids) > httpapi.MaxSelection {
		ids = ids[:httpapi.MaxSelection]
	}
	if !all && len(ids) == 0 {
		http.Redirect(w, r, "/dead?done="+url.QueryEscape("nothing selected"), http.StatusSeeOther)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		what := plural(len(ids), "message")
		fields := map[string][]string{"action": {action}, "id": ids}
		if all {
			what, fields["all"] = "all dead messages (the oldest 1,000 at a time)", []string{"1"}
		}
		explain := "Redriven messages are scheduled again, due now."
		if action == "purge" {
			explain = "Purged messages are deleted for good."
		}
		c.render(w, http.StatusOK, "confirm.html", map[string]any{"S": s, "Title": "Confirm", "Nav": "dead",
			"Question": strings.ToUpper(action[:1]) + action[1:] + " " + what + "?", "Explain": explain, "IDs": ids,
			"List": !all, "Post": "/dead", "Back": "/dead", "Verb": action, "Danger": action == "purge", "Fields": fields})
		return
	}
	if all {
		page, err := c.o.API.ReadDeadFor(r.Context(), s.Caller, "", httpapi.MaxSelection)
		if err != nil {
			c.render(w, http.StatusServiceUnavailable, "error.html", map[string]any{"S": s, "Title": "Failed", "Error": err.Error()})
			return
		}
		ids = ids[:0]
		for _, d := range page.Dead {
			ids = append(ids, d.ID)
		}
	}
	op := c.o.Producer.Redrive
	if action == "purge" {
		op = c.o.Producer.Purge
	}
	done := 0
	for _, id := range ids {
		err := c.mayAddress(r.Context(), s, httpapi.RoleOperate, id)
		if err == nil {
			err = op(r.Context(), id)
		}
		if err != nil && !errors.Is(err, shard.ErrNotFound) { // not found: gone, or not its own
			c.audit(s, action, fmt.Sprintf("%d dead messages", len(ids)), fmt.Errorf("%d done, then %s: %w", done, id, err))
			c.render(w, statusOf(err), "error.html", map[string]any{"S": s, "Title": "Failed",
				"Error": fmt.Sprintf("%s %s: %v (%d done before it)", action, id, err, done)})
			return
		}
		done++
	}
	c.audit(s, action, auditTarget(ids, all), nil)
	verb := map[string]string{"redrive": "redriven", "purge": "purged"}[action]
	http.Redirect(w, r, "/dead?done="+url.QueryEscape(plural(done, "message")+" "+verb), http.StatusSeeOther)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, shard.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, shard.ErrInFlight):
		return http.StatusConflict
	case errors.Is(err, shard.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// auditTarget names the dead messages of a redrive or purge for the audit
// log: all, or the ids (the first 20 and how many more).
func auditTarget(ids []string, all bool) string {
	if all {
		return fmt.Sprintf("all (the oldest %d)", len(ids))
	}
	if len(ids) > 20 {
		return strings.Join(ids[:20], ",") + fmt.Sprintf(" and %d more", len(ids)-20)
	}
	return strings.Join(ids, ",")
}
