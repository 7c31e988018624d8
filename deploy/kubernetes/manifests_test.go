// Package kubernetes holds the Kubernetes manifests of xdsbridge; its test
// decodes each one strictly into the Kubernetes API types and checks that
// they agree with each other and with the bridge's config in the ConfigMap.
package kubernetes

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// decode reads file into obj, failing on unknown or duplicate fields, and
// checks its apiVersion and kind.
func decode(t *testing.T, file, apiVersion, kind string, obj any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &tm); err != nil {
		t.Fatal(err)
	}
	if tm.APIVersion != apiVersion || tm.Kind != kind {
		t.Fatalf("%s: %s %s, want %s %s", file, tm.APIVersion, tm.Kind, apiVersion, kind)
	}
}

// bridgeConfig is the part of the bridge's config the manifests follow.
type bridgeConfig struct {
	XDS   struct{ Listen string } `json:"xds"`
	Admin struct{ Listen string } `json:"admin"`
}

// listenPort is the port of a listen address that every interface reaches
// (a pod's probes and Service come from outside its loopback).
func listenPort(t *testing.T, field, addr string) int32 {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", field, addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s %q: listens on %s only, unreachable by the kubelet's probes and the Service", field, addr, host)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("%s %q: %v", field, addr, err)
	}
	return int32(p)
}

func TestManifests(t *testing.T) {
	var (
		cm  corev1.ConfigMap
		dep appsv1.Deployment
		svc corev1.Service
		pdb policyv1.PodDisruptionBudget
	)
	decode(t, "configmap.yaml", "v1", "ConfigMap", &cm)
	decode(t, "deployment.yaml", "apps/v1", "Deployment", &dep)
	decode(t, "service.yaml", "v1", "Service", &svc)
	decode(t, "poddisruptionbudget.yaml", "policy/v1", "PodDisruptionBudget", &pdb)

	// The pod mounts the ConfigMap and runs on its config file.
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	var mount string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name {
					mount = m.MountPath
				}
			}
		}
	}
	if mount == "" {
		t.Fatalf("ConfigMap %s is not mounted in container %s", cm.Name, c.Name)
	}
	i := slices.Index(c.Args, "-config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %q: no -config FILE", c.Args)
	}
	cfgFile := c.Args[i+1]
	key, ok := strings.CutPrefix(cfgFile, mount+"/")
	if !ok || cm.Data[key] == "" {
		t.Fatalf("-config %s: not a key of ConfigMap %s mounted at %s (keys: %v)", cfgFile, cm.Name, mount, slices.Sorted(maps.Keys(cm.Data)))
	}
	var cfg bridgeConfig
	if err := yaml.Unmarshal([]byte(cm.Data[key]), &cfg); err != nil {
		t.Fatalf("ConfigMap %s: %v", key, err)
	}
	xdsPort := listenPort(t, "xds.listen", cfg.XDS.Listen)
	adminPort := listenPort(t, "admin.listen", cfg.Admin.Listen)

	// Container ports are the config's.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["xds"] != xdsPort || ports["admin"] != adminPort {
		t.Errorf("container ports %v, want xds %d and admin %d (xds.listen, admin.listen)", ports, xdsPort, adminPort)
	}
	portOf := func(what string, p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			n, ok := ports[p.StrVal]
			if !ok {
				t.Errorf("%s: port %q is not a container port", what, p.StrVal)
			}
			return n
		}
		return p.IntVal
	}

	// Probes: liveness on /livez, readiness on /readyz, of the admin port.
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/livez"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}, {"startupProbe", c.StartupProbe, "/livez"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s: no httpGet probe", pr.name)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path || portOf(pr.name, pr.probe.HTTPGet.Port) != adminPort {
			t.Errorf("%s: GET %s on port %v, want %s on the admin port %d", pr.name, pr.probe.HTTPGet.Path, pr.probe.HTTPGet.Port.String(), pr.path, adminPort)
		}
	}
	if got := dep.Spec.Template.Annotations["prometheus.io/port"]; got != strconv.Itoa(int(adminPort)) {
		t.Errorf("prometheus.io/port %q, want the admin port %d", got, adminPort)
	}

	// Two replicas, selected by the Service and the disruption budget.
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	sel, err := labels.ValidatedSelectorFromSet(dep.Spec.Selector.MatchLabels)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("Deployment selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
	}
	if pdb.Spec.Selector == nil || !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector does not select the pods %v", podLabels)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || int32(pdb.Spec.MinAvailable.IntValue()) >= *dep.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %v: want at least 1 and fewer than the %d replicas (a drain must be able to proceed)", pdb.Spec.MinAvailable, *dep.Spec.Replicas)
	}

	// The Service serves xDS and admin on the container's ports.
	svcPorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = portOf("Service port "+p.Name, p.TargetPort)
	}
	if svcPorts["xds"] != xdsPort || svcPorts["admin"] != adminPort {
		t.Errorf("Service target ports %v, want xds %d and admin %d", svcPorts, xdsPort, adminPort)
	}

	// Not root, read-only root filesystem, no privileges, bounded memory.
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, every capability dropped", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
}

// The kustomization names every manifest of the directory.
func TestKustomizationListsEveryManifest(t *testing.T) {
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	slices.Sort(k.Resources)
	if !slices.Equal(files, k.Resources) {
		t.Errorf("kustomization resources %v, want every manifest %v", k.Resources, files)
	}
}
