// Package jsonmsg words encoding/json's decoding errors for the client who
// sent the document: a value of the wrong type names its field and the JSON
// it must be, never a Go type.
package jsonmsg

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Reason says what is wrong with a document that failed to decode.
func Reason(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		want := kind(typeErr.Type.Kind())
		if typeErr.Field == "" {
			return fmt.Sprintf("must be %s, not %s", want, typeErr.Value)
		}
		return fmt.Sprintf("%s must be %s, not %s", typeErr.Field, want, typeErr.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// kind names a Go kind as the JSON a sender must give.
func kind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer, reflect.Interface:
		return "an object or a value of the documented type"
	}
	return k.String()
}
