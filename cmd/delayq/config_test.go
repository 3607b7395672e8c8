package main

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestConfigTableListsEveryVariable keeps configs/README.md's configuration table and
// the Config struct in step: every variable with its default and meaning.
func TestConfigTableListsEveryVariable(t *testing.T) {
	readme, err := os.ReadFile("../../configs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `"+envPrefix+"_") {
			cells := strings.Split(line, "|")
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
		}
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		key := envPrefix + "_" + f.Tag.Get("envconfig")
		row, ok := rows[key]
		if !ok {
			t.Errorf("configs/README.md does not list %s", key)
			continue
		}
		delete(rows, key)
		cells := strings.Split(row, "|")
		if def := f.Tag.Get("default"); strings.Trim(strings.TrimSpace(cells[2]), "`") != def {
			t.Errorf("configs/README.md: %s default %q, code says %q", key, strings.TrimSpace(cells[2]), def)
		}
	}
	for key := range rows {
		t.Errorf("configs/README.md lists %s, which the code does not read", key)
	}
}

func TestDefaultsAreValid(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "") // restores the value after the test
			os.Unsetenv(k)
		}
	}
	c, err := loadConfig()
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if c.Shards != 16 || c.Goroutines != 128 || c.ClaimBatch != 1 || c.Namespace != "default" {
		t.Errorf("defaults %+v", c)
	}
}
