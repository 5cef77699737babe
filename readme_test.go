package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeLayoutMatchesPackages: the README's layout table names every package of
// the module (every directory with a non-test Go file), and only those.
func TestReadmeLayoutMatchesPackages(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start, end := strings.Index(readme, "\n## Layout"), strings.Index(readme, "\n## From your own module")
	if start < 0 || end < start {
		t.Fatal("README has no Layout section before From your own module")
	}
	named := map[string]bool{}
	name := regexp.MustCompile("`([^`]+)`")
	for _, l := range strings.Split(readme[start:end], "\n") {
		if cells := strings.Split(l, "|"); strings.HasPrefix(l, "| `") && len(cells) > 2 {
			for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
				named[m[1]] = true
			}
		}
	}
	pkgs := map[string]bool{}
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(p))
			if dir == "." {
				dir = "sandbox"
			}
			pkgs[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range pkgs {
		if !named[p] {
			t.Errorf("package %s is missing from the README's layout table", p)
		}
	}
	for n := range named {
		if !pkgs[n] {
			t.Errorf("the README's layout table names %s, which is no package", n)
		}
	}
}
