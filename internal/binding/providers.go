package binding

import (
	"github.com/xemahq/xema/internal/connector"
	"github.com/xemahq/xema/internal/connector/chat"
	"github.com/xemahq/xema/internal/connector/scm"
	"github.com/xemahq/xema/internal/connector/tracker"
)

// Providers is every built-in provider: the SCM and tracker families on GitHub, GitLab and
// Gitea, the chat family on Slack and Telegram.
func Providers() connector.Registry {
	r := connector.Registry{}
	for _, name := range []string{"github", "gitlab", "gitea"} {
		p := &connector.Provider{Name: name, Handlers: map[string]connector.Handler{}, CheckConfig: connector.CheckRepositoryConfig}
		for _, hs := range []map[string]connector.Handler{scm.Handlers(name), tracker.Handlers(name)} {
			for ref, h := range hs {
				p.Handlers[ref] = h
			}
		}
		r.Add(p)
	}
	return r.Add(chat.Slack(), chat.Telegram())
}
