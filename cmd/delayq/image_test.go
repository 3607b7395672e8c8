package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDockerfileBuildsWhatTheManifestRuns: the Dockerfile's own go build
// line, run here, makes a static binary that runs; the image's user,
// entrypoint, command and port agree with the Kubernetes manifest, whose
// image is the one scripts/image.sh builds. (Building the image itself
// needs a container builder, which scripts/image.sh uses when there is one.)
func TestDockerfileBuildsWhatTheManifestRuns(t *testing.T) {
	raw, err := os.ReadFile("../../configs/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*) -o /out/delayq (\./cmd/delayq)$`).FindStringSubmatch(df)
	if build == nil {
		t.Fatal("no `RUN CGO_ENABLED=0 go build ... -o /out/delayq ./cmd/delayq` line in the Dockerfile")
	}
	bin := filepath.Join(t.TempDir(), "delayq")
	cmd := exec.Command("sh", "-c", build[1]+" -o "+bin+" "+build[2])
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build[1], err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked: the distroless static base has no libc")
		}
	}
	_ = f.Close()
	if out, err := exec.Command(bin, "help").CombinedOutput(); err != nil || !strings.Contains(string(out), "scan") {
		t.Errorf("the image's binary does not run: %v\n%s", err, out)
	}

	// The Dockerfile's runtime stage.
	user := regexp.MustCompile(`(?m)^USER (\d+)(?::(\d+))?$`).FindStringSubmatch(df)
	if user == nil || user[1] == "0" {
		t.Errorf("USER %v: want a numeric non-root user (Kubernetes' runAsNonRoot cannot verify a name)", user)
	}
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]$`).FindStringSubmatch(df)
	copied := regexp.MustCompile(`(?m)^COPY --from=build /out/delayq (\S+)$`).FindStringSubmatch(df)
	if entry == nil || copied == nil || entry[1] != copied[1] {
		t.Errorf("ENTRYPOINT %v does not run the copied binary %v", entry, copied)
	}
	expose := regexp.MustCompile(`(?m)^EXPOSE (\d+)$`).FindStringSubmatch(df)

	// The manifest.
	kinds := manifestKinds(t)
	deploy, cm := kinds["Deployment"], kinds["ConfigMap"]
	c := deploy["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	script, err := os.ReadFile("../../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := regexp.MustCompile(`IMAGE="\$\{IMAGE:-([^}]+)\}"`).FindStringSubmatch(string(script))
	if image, _ := c["image"].(string); repo == nil || !strings.HasPrefix(image, repo[1]+":") {
		t.Errorf("manifest image %q is not the %v that scripts/image.sh builds", c["image"], repo)
	}
	if c["command"] != nil {
		t.Errorf("manifest overrides the entrypoint with %v", c["command"])
	}
	args, _ := c["args"].([]any)
	if len(args) == 0 || args[0] != "scan" {
		t.Errorf("manifest args %v: want [scan]", args)
	}
	sc, _ := c["securityContext"].(map[string]any)
	if sc["runAsNonRoot"] != true {
		t.Error("manifest does not require runAsNonRoot, which the image's numeric USER allows")
	}
	port := c["ports"].([]any)[0].(map[string]any)["containerPort"]
	addr, _ := cm["data"].(map[string]any)["DELAYQ_METRICS_ADDR"].(string)
	if expose == nil || strconv.Itoa(port.(int)) != expose[1] || !strings.HasSuffix(addr, ":"+expose[1]) {
		t.Errorf("ports disagree: EXPOSE %v, containerPort %v, DELAYQ_METRICS_ADDR %q", expose, port, addr)
	}
}
