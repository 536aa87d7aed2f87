// Command kstatus prints what sigs.k8s.io/cli-utils' kstatus library computes for Kubernetes
// objects: the status (Current, InProgress, Failed, Terminating, ...) that Flux, `kpt live`
// and other kstatus-based tools wait on. The e2e tests read cronlease's objects through it, so
// the conditions the operator writes are judged by the library's own rules, not a copy of them.
//
//	kubectl get sj NAME -o json | kstatus        # one JSON line per object
//	kstatus FILE...                              # YAML or JSON; lists and multi-document files too
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// reading is one line of output.
type reading struct {
	Kind       string             `json:"kind"`
	Namespace  string             `json:"namespace,omitempty"`
	Name       string             `json:"name"`
	Status     string             `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions"`
}

func main() {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	sources := os.Args[1:]
	if len(sources) == 0 {
		sources = []string{"-"}
	}
	for _, source := range sources {
		if err := readAll(source, out); err != nil {
			out.Flush()
			fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", source, err)
			os.Exit(1)
		}
	}
}

func readAll(source string, out io.Writer) error {
	var in io.Reader = os.Stdin
	if source != "-" {
		file, err := os.Open(source)
		if err != nil {
			return err
		}
		defer file.Close()
		in = file
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	for {
		var raw json.RawMessage
		if err := decoder.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue // an empty YAML document
		}
		// The scheme keeps integers as int64, as an API client sees them (kstatus wants them so).
		object, err := runtime.Decode(unstructured.UnstructuredJSONScheme, raw)
		if err != nil {
			return err
		}
		if err := emit(object, out); err != nil {
			return err
		}
	}
}

// emit writes the reading of an object, or of each item of a List.
func emit(decoded runtime.Object, out io.Writer) error {
	if list, ok := decoded.(*unstructured.UnstructuredList); ok {
		for i := range list.Items {
			if err := emit(&list.Items[i], out); err != nil {
				return err
			}
		}
		return nil
	}
	object, ok := decoded.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("not an object: %T", decoded)
	}
	result, err := status.Compute(object)
	if err != nil {
		return fmt.Errorf("%s %s: %w", object.GetKind(), object.GetName(), err)
	}
	line, err := json.Marshal(reading{
		Kind:       object.GetKind(),
		Namespace:  object.GetNamespace(),
		Name:       object.GetName(),
		Status:     result.Status.String(),
		Message:    result.Message,
		Conditions: result.Conditions,
	})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", line)
	return err
}
