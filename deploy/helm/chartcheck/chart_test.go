// Package chartcheck checks the Helm chart deploy/helm/xema without a cluster: helm lint
// --strict and helm template (helm v3.22.0, tools/helm/build.sh) for the default values and
// each ci/*-values.yaml, every rendered object decoded strictly into its Kubernetes API type
// (an unknown or misspelt field fails), and what the chart promises checked on the objects.
// It is a module of its own so the gateway's go.mod does not carry the k8s.io/api types.
package chartcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// kubeVersion is the cluster version helm renders for (the chart needs >= 1.30).
const kubeVersion = "1.33.0"

// kinds are the API types the chart may render, by apiVersion and kind. Anything else fails.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy", "helm", "xema") }

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm is the pinned helm binary: $XEMA_HELM, else tools/helm/build.sh's (built once, cached).
func helm(t *testing.T) string {
	helmOnce.Do(func() {
		if helmPath = os.Getenv("XEMA_HELM"); helmPath != "" {
			return
		}
		out, err := exec.Command(filepath.Join(repoRoot(t), "tools", "helm", "build.sh")).Output()
		if err != nil {
			helmErr = fmt.Errorf("tools/helm/build.sh: %w", err)
			if ee, ok := err.(*exec.ExitError); ok {
				helmErr = fmt.Errorf("%w\n%s", helmErr, ee.Stderr)
			}
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		helmPath = lines[len(lines)-1]
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// runHelm runs helm with its state directories in a temp dir (no repositories, no cache of
// the user's) and returns stdout, or stdout and stderr with the error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// rendered is one `helm template`: the objects by kind and name.
type rendered struct {
	objects map[string]any // "Kind/name" -> typed object
}

func (r rendered) get(t *testing.T, kind, name string) any {
	t.Helper()
	o, ok := r.objects[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s rendered; have %v", kind, name, slices.Sorted(maps.Keys(r.objects)))
	}
	return o
}

func (r rendered) kinds() []string {
	var out []string
	for k := range r.objects {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// render runs helm template with the values files (none: the defaults) and decodes every
// object strictly into its API type.
func render(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "xema", chartDir(t), "--namespace", "gateways", "--kube-version", kubeVersion}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{objects: map[string]any{}}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		newObj, ok := kinds[head.APIVersion+"/"+head.Kind]
		if !ok {
			t.Fatalf("rendered %s %s: not a kind this check knows (add its API type to kinds)", head.APIVersion, head.Kind)
		}
		obj := newObj()
		// Strict: a field the API type does not have (a typo, a wrong level) or a duplicate
		// key fails, as the API server's strict field validation would.
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s %s does not decode strictly into its API type: %v\n%s", head.Kind, head.Metadata.Name, err, doc)
		}
		key := head.Kind + "/" + head.Metadata.Name
		if _, dup := r.objects[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		if errs := validation.IsDNS1123Subdomain(head.Metadata.Name); len(errs) > 0 {
			t.Fatalf("%s: invalid name: %v", key, errs)
		}
		r.objects[key] = obj
	}
	return r
}

// stripComments drops whole-line YAML comments (helm's "# Source:" lines).
func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// valuesCase is one values file and what its render must hold.
type valuesCase struct {
	file      string   // under the chart; "" for the defaults
	set       []string // --set beside it: what the defaults leave to the operator
	fullname  string
	replicas  int32
	kinds     []string
	migration string // hook, initContainer or none
}

var cases = []valuesCase{
	{file: "", set: []string{"config.issuer=https://idp.example.com/realms/xema"}, fullname: "xema", replicas: 3, migration: "hook", kinds: []string{
		"ConfigMap/xema", "Deployment/xema", "Job/xema-migrate", "NetworkPolicy/xema", "PodDisruptionBudget/xema",
		"Service/xema", "ServiceAccount/xema"}},
	{file: "ci/production-values.yaml", fullname: "xema", replicas: 5, migration: "hook", kinds: []string{
		"ConfigMap/xema", "ConfigMap/xema-dashboard", "ConfigMap/xema-policies", "Deployment/xema", "Job/xema-migrate",
		"NetworkPolicy/xema", "PodDisruptionBudget/xema", "Service/xema", "ServiceAccount/xema", "ServiceMonitor/xema"}},
	{file: "ci/single-values.yaml", fullname: "gateway", replicas: 1, migration: "initContainer", kinds: []string{
		"ConfigMap/gateway", "Deployment/gateway", "Secret/gateway-store", "Service/gateway"}},
}

// TestChart lints and renders the chart for each values file and checks the objects.
func TestChart(t *testing.T) {
	flags := serveFlags(t)
	for _, c := range cases {
		name := c.file
		if name == "" {
			name = "defaults"
		}
		t.Run(filepath.Base(name), func(t *testing.T) {
			var args []string
			if c.file != "" {
				args = []string{"--values", filepath.Join(chartDir(t), c.file)}
			}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			if out, err := runHelm(t, append([]string{"lint", "--strict", chartDir(t), "--kube-version", kubeVersion}, args...)...); err != nil {
				t.Fatalf("helm lint --strict: %v", err)
			} else if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Fatalf("helm lint --strict: %s", out)
			}
			r := render(t, args...)
			if got := r.kinds(); !slices.Equal(got, c.kinds) {
				t.Fatalf("rendered %v, want %v", got, c.kinds)
			}
			checkRender(t, r, c, flags)
		})
	}
}

// checkRender checks what the chart promises on one render.
func checkRender(t *testing.T, r rendered, c valuesCase, flags map[string]bool) {
	dep := r.get(t, "Deployment", c.fullname).(*appsv1.Deployment)
	pod := dep.Spec.Template
	podLabels := labels.Set(pod.Labels)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != c.replicas {
		t.Fatalf("replicas %v, want %d", dep.Spec.Replicas, c.replicas)
	}
	selects := func(what string, sel map[string]string) {
		t.Helper()
		if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(podLabels) {
			t.Fatalf("%s selector %v does not select the gateway's pods %v", what, sel, pod.Labels)
		}
	}
	selects("Deployment", dep.Spec.Selector.MatchLabels)
	svc := r.get(t, "Service", c.fullname).(*corev1.Service)
	selects("Service", svc.Spec.Selector)
	if errs := validation.IsDNS1035Label(svc.Name); len(errs) > 0 {
		t.Fatalf("Service name %q: %v", svc.Name, errs)
	}
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		selects("topology spread "+tsc.TopologyKey, tsc.LabelSelector.MatchLabels)
	}
	if o, ok := r.objects["PodDisruptionBudget/"+c.fullname]; ok {
		selects("PodDisruptionBudget", o.(*policyv1.PodDisruptionBudget).Spec.Selector.MatchLabels)
	}
	if o, ok := r.objects["NetworkPolicy/"+c.fullname]; ok {
		np := o.(*networkingv1.NetworkPolicy)
		selects("NetworkPolicy", np.Spec.PodSelector.MatchLabels)
		checkNetworkPolicy(t, np)
	}
	if o, ok := r.objects["ServiceMonitor/"+c.fullname]; ok {
		sm := o.(*monitoringv1.ServiceMonitor)
		if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) ||
			len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
			t.Fatalf("the ServiceMonitor does not scrape the Service's metrics port: %+v", sm.Spec)
		}
	}

	checkPodSecurity(t, pod.Spec, "the gateway")
	gw := pod.Spec.Containers[0]
	if len(pod.Spec.Containers) != 1 || gw.Name != "xema" {
		t.Fatalf("containers %v, want the one xema container", pod.Spec.Containers)
	}
	if !slices.Equal(gw.Args, []string{"serve", "--config", "/etc/xema/config.yaml"}) {
		t.Fatalf("gateway args %v", gw.Args)
	}
	checkProbe(t, gw, "liveness", gw.LivenessProbe, "/healthz")
	checkProbe(t, gw, "readiness", gw.ReadinessProbe, "/readyz")
	checkProbe(t, gw, "startup", gw.StartupProbe, "/healthz")
	if gw.Resources.Requests.Memory().IsZero() || gw.Resources.Limits.Memory().IsZero() || gw.Resources.Requests.Cpu().IsZero() {
		t.Fatalf("gateway resources %+v: want cpu and memory requests and a memory limit", gw.Resources)
	}
	checkStoreEnv(t, r, gw, c.fullname)

	// /data (an emptyDir) is the only writable mount; the config comes from the ConfigMap.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	var config string
	for _, m := range gw.VolumeMounts {
		v := vols[m.Name]
		switch {
		case m.MountPath == "/data":
			if v.EmptyDir == nil || m.ReadOnly {
				t.Fatalf("/data: want a writable emptyDir, have %+v", v)
			}
		case !m.ReadOnly:
			t.Fatalf("mount %s is writable: only /data may be", m.MountPath)
		case v.ConfigMap != nil:
			cm := r.get(t, "ConfigMap", v.ConfigMap.Name).(*corev1.ConfigMap)
			if _, ok := cm.Data[m.SubPath]; !ok {
				t.Fatalf("mount %s: ConfigMap %s has no key %q", m.MountPath, cm.Name, m.SubPath)
			}
			if m.MountPath == "/etc/xema/config.yaml" {
				config = cm.Data[m.SubPath]
			}
		default:
			t.Fatalf("mount %s: volume %+v is neither /data nor a ConfigMap", m.MountPath, v)
		}
	}
	cfg := checkConfig(t, config, flags)

	shutdown, err := time.ParseDuration(fmt.Sprint(cfg["shutdown-timeout"]))
	if err != nil {
		t.Fatalf("config shutdown-timeout %v: %v", cfg["shutdown-timeout"], err)
	}
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if gw.Lifecycle != nil && gw.Lifecycle.PreStop != nil && gw.Lifecycle.PreStop.Sleep != nil {
		grace -= time.Duration(gw.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if grace <= shutdown {
		t.Fatalf("terminationGracePeriodSeconds less the preStop pause is %v, not more than shutdown-timeout %v: calls would be cut off", grace, shutdown)
	}

	checkMigration(t, r, c, pod.Spec)
	if o, ok := r.objects["ConfigMap/"+c.fullname+"-dashboard"]; ok {
		checkDashboard(t, o.(*corev1.ConfigMap))
	}
	if o, ok := r.objects["ConfigMap/"+c.fullname+"-policies"]; ok {
		for file, rego := range o.(*corev1.ConfigMap).Data {
			if !strings.HasSuffix(file, ".rego") || !strings.HasPrefix(rego, "package xema.custom\n") {
				t.Fatalf("platform policy %s: want a .rego file of package xema.custom, have %q", file, rego)
			}
		}
	}
}

// checkPodSecurity: the restricted Pod Security Standard, for the pod and each container.
func checkPodSecurity(t *testing.T, spec corev1.PodSpec, what string) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("%s: pod securityContext %+v: want runAsNonRoot, a non-zero runAsUser, seccomp RuntimeDefault", what, psc)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Fatalf("%s: the service account token is mounted; the gateway never calls the Kubernetes API", what)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Fatalf("%s: container %s securityContext %+v: want readOnlyRootFilesystem, runAsNonRoot, no privilege escalation, all capabilities dropped", what, c.Name, sc)
		}
	}
}

func checkProbe(t *testing.T, c corev1.Container, what string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
		t.Fatalf("%s probe %+v: want GET %s", what, p, path)
	}
	for _, port := range c.Ports {
		if port.Name == p.HTTPGet.Port.String() {
			return
		}
	}
	t.Fatalf("%s probe port %s is not a port of container %s", what, p.HTTPGet.Port.String(), c.Name)
}

// checkStoreEnv: the DSN comes from a Secret (the chart's, rendered, or one named in values).
func checkStoreEnv(t *testing.T, r rendered, c corev1.Container, fullname string) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name != "XEMA_STORE" {
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Fatalf("container %s: XEMA_STORE is not read from a Secret: %+v", c.Name, e)
		}
		ref := e.ValueFrom.SecretKeyRef
		if ref.Name == fullname+"-store" {
			s := r.get(t, "Secret", ref.Name).(*corev1.Secret)
			if !strings.HasPrefix(s.StringData[ref.Key], "postgres://") {
				t.Fatalf("Secret %s key %s holds no postgres:// DSN", s.Name, ref.Key)
			}
		}
		return
	}
	t.Fatalf("container %s has no XEMA_STORE", c.Name)
}

// checkConfig: the config file parses, every key is a `xema serve` flag (xema refuses an
// unknown one at start), and the keys the chart owns are what the pod needs.
func checkConfig(t *testing.T, config string, flags map[string]bool) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(config), &cfg); err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, config)
	}
	for k := range cfg {
		if !flags[k] {
			t.Fatalf("config.yaml key %q is not a flag of xema serve (it would refuse to start)", k)
		}
	}
	for k, want := range map[string]string{"data-dir": "/data", "store": "${XEMA_STORE}", "addr": "0.0.0.0:8181", "metrics-addr": "0.0.0.0:9090"} {
		if cfg[k] != want {
			t.Fatalf("config.yaml %s: %v, want %s", k, cfg[k], want)
		}
	}
	if iss, _ := cfg["issuer"].(string); !strings.HasPrefix(iss, "https://") || cfg["audience"] == "" || cfg["audience"] == nil {
		t.Fatalf("config.yaml issuer %v, audience %v: replicas need one external issuer and the audience its tokens carry", cfg["issuer"], cfg["audience"])
	}
	return cfg
}

// checkNetworkPolicy: the unauthenticated metrics port is open only to the named scraper.
func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.String() == "metrics" && len(rule.From) == 0 {
				t.Fatal("the NetworkPolicy opens the unauthenticated metrics port to every source")
			}
		}
	}
}

// checkMigration: `xema migrate` runs before the replicas serve, as a hook Job or an init
// container, against the same DSN, as restricted as the gateway.
func checkMigration(t *testing.T, r rendered, c valuesCase, pod corev1.PodSpec) {
	t.Helper()
	var migrate corev1.Container
	switch c.migration {
	case "hook":
		job := r.get(t, "Job", c.fullname+"-migrate").(*batchv1.Job)
		if hook := job.Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
			t.Fatalf("migration Job hook %q, want pre-install,pre-upgrade", hook)
		}
		// Not a gateway pod: the Service, PDB and NetworkPolicy must not select it.
		if job.Spec.Template.Labels["app.kubernetes.io/component"] != "migrate" {
			t.Fatalf("migration pod labels %v: want component migrate", job.Spec.Template.Labels)
		}
		checkPodSecurity(t, job.Spec.Template.Spec, "the migration Job")
		if len(pod.InitContainers) != 0 {
			t.Fatalf("hook mode and init containers %v", pod.InitContainers)
		}
		migrate = job.Spec.Template.Spec.Containers[0]
		if o, ok := r.objects["Secret/"+c.fullname+"-store"]; ok {
			// The Job runs before the release's ordinary objects exist: its Secret must be an earlier hook.
			secretW, err1 := strconv.Atoi(o.(*corev1.Secret).Annotations["helm.sh/hook-weight"])
			jobW, err2 := strconv.Atoi(job.Annotations["helm.sh/hook-weight"])
			if err1 != nil || err2 != nil || secretW >= jobW {
				t.Fatalf("the chart's DSN Secret is no earlier hook than the migration Job (weights %v, %v)", o.(*corev1.Secret).Annotations, job.Annotations)
			}
		}
	case "initContainer":
		if len(pod.InitContainers) != 1 {
			t.Fatalf("init containers %v, want the migration", pod.InitContainers)
		}
		migrate = pod.InitContainers[0]
	}
	if !slices.Equal(migrate.Args, []string{"migrate"}) || migrate.Image != pod.Containers[0].Image {
		t.Fatalf("migration container %+v: want args [migrate] on the gateway's image", migrate)
	}
	checkStoreEnv(t, r, migrate, c.fullname)
}

// checkDashboard: the ConfigMap holds deploy/grafana/xema-dashboard.json with its datasource
// input bound.
func checkDashboard(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "xema-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := cm.Data["xema-dashboard.json"]
	if strings.Contains(got, "${DS_PROMETHEUS}") || !json.Valid([]byte(got)) {
		t.Fatalf("the dashboard ConfigMap holds no valid JSON with its datasource bound")
	}
	var want, have map[string]any
	_ = json.Unmarshal(raw, &want)
	_ = json.Unmarshal([]byte(got), &have)
	if have["uid"] != want["uid"] || fmt.Sprint(len(have["panels"].([]any))) != fmt.Sprint(len(want["panels"].([]any))) {
		t.Fatalf("the dashboard ConfigMap is not deploy/grafana/xema-dashboard.json")
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Fatalf("dashboard labels %v: want the sidecar's grafana_dashboard=1", cm.Labels)
	}
}

// serveFlags are the flag names of `xema serve`, from its --help: of $XEMA_BIN (make test
// passes the bin/xema it has just built), else of a build of this checkout.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := os.Getenv("XEMA_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "xema")
		build := exec.Command("go", "build", "-o", bin, "./cmd/xema")
		build.Dir = repoRoot(t)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/xema: %v\n%s", err, out)
		}
	}
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("xema serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["issuer"] || !flags["store"] {
		t.Fatalf("xema serve --help names no --issuer or --store:\n%s", out)
	}
	return flags
}

// Values that would make a broken deployment are refused with a message naming them; the
// shipped values alone are refused for want of the operator's issuer.
func TestChartRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"config.addr=0.0.0.0:80"}, "config.addr is set by the chart"},
		{[]string{"config.store=postgres://x"}, "config.store is set by the chart"},
		{nil, "config.issuer (your OIDC issuer) is required: its URL, the exact iss of its tokens, e.g. --set config.issuer=https://"},
		{[]string{"config.issuer="}, "config.issuer (your OIDC issuer) is required"},
		{[]string{"config.audience="}, "config.audience (the audience your issuer's tokens carry for the gateway) is required"},
		{[]string{"store.existingSecret="}, "store.existingSecret (a Secret holding the PostgreSQL DSN) or store.dsn is required"},
		{[]string{"migrations.mode=sometimes"}, `migrations.mode "sometimes": want hook, initContainer or none`},
		{[]string{"networkPolicy.metricsFrom=null"}, "networkPolicy.metricsFrom must name the scraper"},
	} {
		args := []string{"template", "xema", chartDir(t), "--kube-version", kubeVersion}
		if c.set != nil { // the issuer the defaults leave out, so each case fails on its own value
			args = append(args, "--set", "config.issuer=https://idp.example.com/realms/xema")
		}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		_, err := runHelm(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("helm template --set %v: %v; want an error saying %q", c.set, err, c.want)
		}
	}
}

// TestChartRendersOfflineAsDocumented runs the chart README's render block as written, in bash
// from the repository's root with the pinned helm on the PATH: it renders the Deployment with
// the issuer given, into the file the README names.
func TestChartRendersOfflineAsDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- chart:render [^>]*-->\n```sh\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("deploy/helm/xema/README.md has no chart:render block")
	}
	bin := t.TempDir()
	if err := os.Symlink(helm(t), filepath.Join(bin, "helm")); err != nil {
		t.Fatal(err)
	}
	run := func(script string) (string, error) {
		home := t.TempDir()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
			"HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out := filepath.Join(t.TempDir(), "xema-rendered.yaml")
	script := strings.ReplaceAll(string(m[1]), "> xema-rendered.yaml", "> "+out) // not into the checkout
	if got, err := run(script); err != nil {
		t.Fatalf("the README's render failed: %v\n%s", err, got)
	}
	rendered, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(rendered), "kind: Deployment") || !strings.Contains(string(rendered), "issuer: https://keycloak.example.com/realms/acme") {
		t.Fatalf("the README's render holds no Deployment with the issuer: %v\n%s", err, rendered)
	}
}
