package console

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard/httpapi"
)

// exportKinds are the exports the page offers, as GET /v1/export names
// them.
var exportKinds = map[string]bool{"messages": true, "schedules": true, "dead": true}

// exportChunk is how many lines of an export download go out between two
// flushes: a page of the export's walk.
const exportChunk = 1000

// exportPage offers the namespace's export as downloads: the scheduled
// messages, the recurring schedules and the dead messages, each the JSON
// Lines delayq export writes. A session limited to scopes is told that an
// export needs read on the whole namespace (it is every message's body).
func (c *Console) exportPage(w http.ResponseWriter, r *http.Request, s session) {
	c.render(w, http.StatusOK, "export.html", map[string]any{"S": s, "Title": "Export", "Nav": "export",
		"Whole": s.Caller.Global(httpapi.RoleRead)})
}

// exportDownload streams one kind's export whole, as a file, through
// httpapi.API.Export (what GET /v1/export runs), flushed every
// exportChunk lines, so memory stays bounded for any namespace. An error
// before the first line is an error page; after it the response is
// aborted, so the browser reports the download failed instead of keeping
// a file cut short. Each download is logged with who asked and how many
// lines it gave.
func (c *Console) exportDownload(w http.ResponseWriter, r *http.Request, s session) {
	kind := r.PathValue("kind")
	if !exportKinds[kind] {
		c.render(w, http.StatusNotFound, "error.html", map[string]any{"S": s, "Title": "Not found", "Nav": "export",
			"Error": "There is no export " + kind + ": messages, schedules or dead."})
		return
	}
	if !s.Caller.Global(httpapi.RoleRead) {
		c.render(w, http.StatusForbidden, "error.html", map[string]any{"S": s, "Title": "Not allowed", "Nav": "export",
			"Error": "An export is every message's body: it needs a token that may read the whole namespace, not one limited to scopes."})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Content-Disposition", `attachment; filename="delayq-`+kind+`.jsonl"`)
	rc := http.NewResponseController(w)
	lines, cursor := 0, ""
	var werr error
	for {
		n := 0
		next, err := c.o.API.Export(r.Context(), kind, cursor, func(line []byte) bool {
			if werr == nil {
				_, werr = w.Write(line)
			}
			n++
			return n >= exportChunk || werr != nil
		})
		if err == nil {
			err = werr
		}
		if err != nil && lines+n == 0 {
			h.Del("Content-Disposition")
			c.render(w, statusOf(err), "error.html", map[string]any{"S": s, "Title": "Export failed", "Nav": "export",
				"Error": err.Error()})
			return
		}
		lines += n
		if err != nil {
			c.o.Log.Warn("console export cut short", zap.String("who", s.Name), zap.String("kind", kind), zap.Int("lines", lines), zap.Error(err))
			panic(http.ErrAbortHandler)
		}
		if err := rc.Flush(); err != nil {
			c.o.Log.Warn("console export cut short", zap.String("who", s.Name), zap.String("kind", kind), zap.Int("lines", lines), zap.Error(err))
			panic(http.ErrAbortHandler)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	c.o.Log.Info("console export", zap.String("who", s.Name), zap.String("kind", kind), zap.Int("lines", lines))
}
