// Command release keeps idem's modules releasable together: every module in
// go.work is tagged at one version, recorded in versions.txt, and every
// go.mod requires its siblings at that version (docs/releasing.md).
//
//	go run ./tools/release set v0.2.0      rewrite every go.mod and versions.txt to v0.2.0
//	go run ./tools/release check           fail on a sibling at another version, or a replace
//	go run ./tools/release tags [v0.2.0]   print the git tags of a release
//	go run ./tools/release proxy DIR [v]   write every released module to a file-system module proxy
//	go run ./tools/release apisnapshot     store the public modules' API as the release's (tools/release/api/vX.Y.Z)
//	go run ./tools/release apicheck        fail on an incompatible change since the last snapshot
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), `usage: release <command> [arguments]

  set VERSION        require every sibling module at VERSION in every go.mod,
                     drop sibling replace directives, record VERSION in versions.txt
  check              fail if a go.mod requires a sibling at another version than
                     versions.txt's, or has a replace directive
  tags [VERSION]     print the git tags that release VERSION (default: versions.txt's)
  proxy DIR [VERSION]
                     write every released module at VERSION to DIR as a GOPROXY=file://DIR
  apisnapshot        write the public modules' API to tools/release/api/VERSION
  apicheck           compare the public API with the newest snapshot; fail on an
                     incompatible change that the version does not allow

See docs/releasing.md.
`)
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Args()[1:]); err != nil {
		if !errors.Is(err, errCheck) {
			fmt.Fprintln(os.Stderr, "release:", err)
		}
		os.Exit(1)
	}
}

func run(cmd string, args []string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := findRoot(wd)
	if err != nil {
		return err
	}
	repo, err := loadRepo(root)
	if err != nil {
		return err
	}
	version := func(i int) (string, error) {
		if len(args) <= i {
			return repo.Version, nil
		}
		return args[i], checkVersion(args[i])
	}
	switch cmd {
	case "set":
		if len(args) != 1 {
			return fmt.Errorf("usage: release set VERSION")
		}
		if err := checkVersion(args[0]); err != nil {
			return err
		}
		return repo.Set(args[0])
	case "check":
		if ps := repo.problems(); len(ps) > 0 {
			for _, p := range ps {
				fmt.Fprintln(os.Stderr, "release check:", p)
			}
			return errCheck
		}
		fmt.Printf("release check: %d modules, %d released at %s, no replace directive\n",
			len(repo.Modules), len(repo.Released()), repo.Version)
		return nil
	case "tags":
		v, err := version(0)
		if err != nil {
			return err
		}
		for _, m := range repo.Released() {
			fmt.Println(m.Tag(v))
		}
		return nil
	case "proxy":
		if len(args) < 1 || len(args) > 2 {
			return fmt.Errorf("usage: release proxy DIR [VERSION]")
		}
		v, err := version(1)
		if err != nil {
			return err
		}
		dir, err := filepath.Abs(args[0])
		if err != nil {
			return err
		}
		if err := repo.WriteProxy(dir, v); err != nil {
			return err
		}
		fmt.Printf("GOPROXY=file://%s GONOSUMDB=github.com/idem-go\n", filepath.ToSlash(dir))
		return nil
	case "apisnapshot":
		return repo.APISnapshot(os.Stdout)
	case "apicheck":
		return repo.APICheck(os.Stdout)
	}
	flag.Usage()
	return fmt.Errorf("unknown command %q", cmd)
}

// Set rewrites every go.mod whose sibling requirements or replaces differ
// from v, then versions.txt.
func (r *Repo) Set(v string) error {
	for _, m := range r.Modules {
		data, err := r.withVersion(m, v)
		if err != nil {
			return err
		}
		old, err := os.ReadFile(m.GoMod)
		if err != nil {
			return err
		}
		if string(old) == string(data) {
			continue
		}
		if err := os.WriteFile(m.GoMod, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s/go.mod: siblings at %s\n", m.Dir, v)
	}
	work, err := r.workReplaces(v)
	if err != nil {
		return err
	}
	name := filepath.Join(r.Root, "go.work")
	if old, err := os.ReadFile(name); err != nil {
		return err
	} else if string(old) != string(work) {
		if err := os.WriteFile(name, work, 0o644); err != nil {
			return err
		}
		fmt.Printf("go.work: siblings at %s resolve to the tree\n", v)
	}
	return r.writeVersion(v)
}
