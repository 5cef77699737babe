package kubernetes

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentsandbox/sandbox/internal/gobuild"
)

// InitPackage is the main package of the in-Pod helper (WithInit).
const InitPackage = "github.com/agentsandbox/sandbox/cmd/sandbox-kube-init"

// BuildInit compiles sandbox-kube-init as a static binary into dir (cached by content,
// as bridge.Build does) and returns its path, for WithInit. It must be at the same path
// on every node (a one-node cluster can use it as is).
func BuildInit(ctx context.Context, dir string) (string, error) {
	p, err := gobuild.Cached(ctx, InitPackage, "sandbox-kube-init", dir)
	if err != nil {
		return "", fmt.Errorf("kubernetes: building the init: %w", err)
	}
	return p, nil
}

// Role is the least privilege the runner needs, as a Role in its namespace: create,
// read, watch and delete Pods, read their logs, and exec in them (a session's Exec:
// the exec subresource's create, which both its WebSocket and its SPDY form need).
// Nothing cluster-wide, no Secrets, no Pod updates. Bind it to the runner's identity
// with a RoleBinding.
func Role(namespace, name string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}},
		},
	}
}
