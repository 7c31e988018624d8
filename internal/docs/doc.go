// Package docs holds the tests that keep the documentation true: the
// configuration reference (docs/configuration.md) against the
// configuration's Go types and defaults, and every relative link of
// README.md and docs/*.md against the files and headings it points to.
package docs
