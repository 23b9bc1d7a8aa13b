// Command wget is the `wget` of the real-node lab's agnhost image, written
// for gvs in place of busybox's: Debian 12's busybox 1.35 wget crashes
// (SIGSEGV) whenever it is given a timeout (-T), and upstream's Services
// specs run `wget -q -O - -T 1 URL` and `wget -T 5 -qO- URL` in their exec
// pods. It takes the options those callers use, in busybox's spelling:
//
//	-q            quiet (errors are still printed)
//	-O FILE       write the body to FILE ("-": standard output)
//	-T SECONDS    give up on the whole request after SECONDS
//	-s, --spider  fetch the headers only, print nothing
//
// Single-letter options may be grouped ("-qO-", "-qO -") and long ones
// spelled "--timeout=N", "--output-document=FILE", "--quiet". Only http://
// URLs: the lab has no certificates for its test servers. Exit status 0 on
// a 2xx answer, 1 on anything else, as busybox's.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// options are the parsed command line.
type options struct {
	quiet   bool
	spider  bool
	output  string // "" : the URL's base name
	timeout time.Duration
	url     string
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "wget: %v\n", err)
		os.Exit(1)
	}
	if err := fetch(o); err != nil {
		fmt.Fprintf(os.Stderr, "wget: %v\n", err)
		os.Exit(1)
	}
}

// parse reads busybox wget's options as its callers in the e2e suites
// spell them.
func parse(args []string) (options, error) {
	var o options
	value := func(i *int, rest, name string) (string, error) {
		if rest != "" {
			return rest, nil
		}
		if *i+1 >= len(args) {
			return "", fmt.Errorf("option %s needs a value", name)
		}
		*i++
		return args[*i], nil
	}
	setTimeout := func(v string) error {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			return fmt.Errorf("bad timeout %q", v)
		}
		o.timeout = time.Duration(s * float64(time.Second))
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-s" || a == "--spider":
			o.spider = true
		case a == "--quiet":
			o.quiet = true
		case strings.HasPrefix(a, "--timeout="):
			if err := setTimeout(strings.TrimPrefix(a, "--timeout=")); err != nil {
				return o, err
			}
		case strings.HasPrefix(a, "--output-document="):
			o.output = strings.TrimPrefix(a, "--output-document=")
		case strings.HasPrefix(a, "--"):
			return o, fmt.Errorf("unknown option %s", a)
		case len(a) > 1 && a[0] == '-':
			// A group of single-letter options; O and T take the rest of
			// the group, or the next argument, as their value.
		group:
			for j := 1; j < len(a); j++ {
				switch c := a[j]; c {
				case 'q':
					o.quiet = true
				case 's':
					o.spider = true
				case 'O', 'T':
					v, err := value(&i, a[j+1:], "-"+string(c))
					if err != nil {
						return o, err
					}
					if c == 'O' {
						o.output = v
					} else if err := setTimeout(v); err != nil {
						return o, err
					}
					break group
				default:
					return o, fmt.Errorf("unknown option -%c", c)
				}
			}
		default:
			if o.url != "" {
				return o, errors.New("more than one URL")
			}
			o.url = a
		}
	}
	if o.url == "" {
		return o, errors.New("no URL")
	}
	if !strings.Contains(o.url, "://") {
		o.url = "http://" + o.url
	}
	u, err := url.Parse(o.url)
	if err != nil {
		return o, err
	}
	if u.Scheme != "http" {
		return o, fmt.Errorf("%s: only http:// URLs", o.url)
	}
	if o.output == "" {
		o.output = path.Base(u.Path)
		if o.output == "/" || o.output == "." {
			o.output = "index.html"
		}
	}
	return o, nil
}

// fetch runs the request o describes.
func fetch(o options) error {
	ctx := context.Background()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	method := http.MethodGet
	if o.spider {
		method = http.MethodHead
	}
	req, err := http.NewRequestWithContext(ctx, method, o.url, nil)
	if err != nil {
		return err
	}
	// No proxy from the environment: the lab's pods reach their targets
	// directly, as busybox's wget would without http_proxy.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("download timed out")
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("server returned error: HTTP/%d.%d %s", resp.ProtoMajor, resp.ProtoMinor, resp.Status)
	}
	if o.spider {
		return nil
	}
	var w io.Writer = os.Stdout
	if o.output != "-" {
		f, err := os.Create(o.output)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return errors.New("download timed out")
		}
		return err
	}
	if f, ok := w.(*os.File); ok && f != os.Stdout {
		return f.Close()
	}
	return nil
}
