package turnstile

// The stubs under pb/ come from the repository's protos through buf and the plugins
// pinned in go.mod (gen.sh).
//go:generate sh gen.sh
