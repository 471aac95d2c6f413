//go:build tools

// Package tools pins the k8s.io/kubernetes commands that deploy/kubernetes/setup.sh builds, so
// `go mod tidy` keeps every module they need in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
