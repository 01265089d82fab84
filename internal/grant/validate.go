package grant

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/gobwas/glob"

	"github.com/xemahq/xema/internal/manifest"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/strictjson"
)

// ResourceDelimiters are the separators resource globs are compiled with; the Rego must pass
// the same to glob.match (`glob.match(pattern, ["/"], resource)`), so `*` stays within one
// path segment and `**` crosses them.
var ResourceDelimiters = []rune{'/'}

const maxGlobLen = 512

var subjectPattern = regexp.MustCompile(`^(agent|group|role|user|workflow|service):[A-Za-z0-9][A-Za-z0-9._@:+/-]{0,199}$`)

// Validate checks a decoded request against the biome version it names (nil when the store
// has no such version), the named environments and the profiles. It returns the request
// normalised for storage: profile defaulted to the biome's defaultProfile, lists sorted and
// deduplicated. Errors are Errors of FieldError, each naming a JSON pointer.
func Validate(req Request, bv *store.BiomeVersion, envs Environments, profiles Profiles) (Request, error) {
	if bv == nil || bv.ID != req.BiomeID || bv.Version != req.Version {
		return Request{}, Errors{unknown("/version", CodeUnknownBiomeVersion,
			fmt.Sprintf("biome %q has no version %q", req.BiomeID, req.Version))}
	}
	if req.DigestHash != bv.DigestHash {
		// Nothing else is worth reporting against a digest the admin did not see.
		return Request{}, Errors{{Path: "/digestHash", Code: CodeStaleDigest, Err: ErrConflict,
			Message: fmt.Sprintf("stale digest: %s@%s has digest %s; review it and approve that one", bv.ID, bv.Version, bv.DigestHash)}}
	}
	var biome manifest.Biome
	if err := json.Unmarshal(bv.Manifest, &biome); err != nil {
		return Request{}, fmt.Errorf("stored manifest of %s@%s: %w", bv.ID, bv.Version, err)
	}

	var errs Errors
	out := req
	if out.Profile == "" {
		out.Profile = biome.DefaultProfile
	}
	if _, ok := profiles[out.Profile]; !ok {
		msg := fmt.Sprintf("unknown profile %q (one of %v)", out.Profile, profiles.Names())
		if req.Profile == "" {
			msg = fmt.Sprintf("no profile given and the biome's defaultProfile %q is unknown (one of %v)", out.Profile, profiles.Names())
		}
		errs = append(errs, unknown("/profile", CodeUnknownProfile, msg))
	}

	if len(req.Customize) > 0 {
		out.Customize = make(map[string]Customization, len(req.Customize))
	}
	for _, ref := range slices.Sorted(maps.Keys(req.Customize)) {
		path := strictjson.Pointer("/customize", ref)
		if !contains(biome.RequiresCapabilities, ref) {
			errs = append(errs, unknown(path, CodeUnknownCapability,
				fmt.Sprintf("%s@%s does not require %q", bv.ID, bv.Version, ref)))
			continue
		}
		c, cerrs := validateCustomization(req.Customize[ref], path, envs)
		errs = append(errs, cerrs...)
		out.Customize[ref] = c
	}
	if err := errs.err(); err != nil {
		return Request{}, err
	}
	return out, nil
}

func validateCustomization(c Customization, path string, envs Environments) (Customization, Errors) {
	var errs Errors
	for i, name := range c.Environments {
		if _, ok := envs.Lookup(name); !ok {
			errs = append(errs, unknown(strictjson.Pointer(path, "environments", fmt.Sprint(i)), CodeUnknownEnvironment,
				fmt.Sprintf("unknown environment %q (one of %v)", name, envs.Names())))
		}
	}
	for i, s := range c.Subjects {
		if !subjectPattern.MatchString(s) {
			errs = append(errs, invalid(strictjson.Pointer(path, "subjects", fmt.Sprint(i)), CodeInvalidSubject,
				fmt.Sprintf("%q must be kind:name with kind one of agent, group, role, user, workflow, service", s)))
		}
	}
	for i, g := range c.Resources {
		p := strictjson.Pointer(path, "resources", fmt.Sprint(i))
		if g == "" || len(g) > maxGlobLen {
			errs = append(errs, invalid(p, CodeInvalidGlob, fmt.Sprintf("glob must be 1 to %d characters", maxGlobLen)))
			continue
		}
		if _, err := glob.Compile(g, ResourceDelimiters...); err != nil {
			errs = append(errs, invalid(p, CodeInvalidGlob, fmt.Sprintf("glob %q does not compile: %v", g, err)))
		}
	}
	for i, a := range c.Audience {
		if !contains(classifications, a) {
			errs = append(errs, invalid(strictjson.Pointer(path, "audience", fmt.Sprint(i)), CodeInvalidValue,
				fmt.Sprintf("%q is not an output classification (one of %v)", a, classifications)))
		}
	}
	for _, l := range []struct {
		name  string
		limit *Limit
		max   int
	}{{"rateLimit", c.RateLimit, maxRateRequests}, {"quota", c.Quota, maxQuotaRequests}} {
		if l.limit == nil {
			continue
		}
		if fe := l.limit.check(l.max); fe != nil {
			fe.Path = strictjson.Pointer(path, l.name) + fe.Path
			errs = append(errs, fe)
		}
	}
	c.Environments = sortedSet(c.Environments)
	c.Subjects = sortedSet(c.Subjects)
	c.Resources = sortedSet(c.Resources)
	c.Audience = sortedSet(c.Audience)
	return c, errs
}

// NewGrant records a validated request as a BiomeInstallGrant approved by approvedBy at now.
func NewGrant(req Request, approvedBy string, now time.Time) (store.Grant, error) {
	id, err := newID()
	if err != nil {
		return store.Grant{}, err
	}
	g := store.Grant{
		ID:           id,
		BiomeID:      req.BiomeID,
		BiomeVersion: req.Version,
		DigestHash:   req.DigestHash,
		Profile:      req.Profile,
		ApprovedBy:   approvedBy,
		ApprovedAt:   now.UTC(),
	}
	if len(req.Customize) > 0 {
		if g.Customize, err = json.Marshal(req.Customize); err != nil {
			return store.Grant{}, fmt.Errorf("encode customize: %w", err)
		}
	}
	return g, nil
}

func newID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("grant id: %w", err)
	}
	return "g_" + hex.EncodeToString(b[:]), nil
}

func sortedSet(list []string) []string {
	if list == nil {
		return nil
	}
	return slices.Compact(slices.Sorted(slices.Values(list)))
}
