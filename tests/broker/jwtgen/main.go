// jwtgen makes and checks operator-mode material with nats-io/jwt v2 and nkeys, the libraries `nsc` uses,
// so jsbroker's tests can use JWTs made by the real encoders and check their own encoder against them.
//
//	jwtgen make   < spec.json    # an operator, its accounts and their users: JWTs, seeds and .creds as JSON
//	jwtgen verify < jwts.json    # a JSON list of JWTs: each decoded (jwt.Decode) and validated, issues as JSON
//
// A spec names the operator, the system account and the accounts: each with nats-io/jwt's JetStreamLimits,
// exports and imports (an import's "account" is another account's name) and user names.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

type accountSpec struct {
	Name      string              `json:"name"`
	JetStream jwt.JetStreamLimits `json:"jetstream"`
	Exports   jwt.Exports         `json:"exports"`
	Imports   jwt.Imports         `json:"imports"`
	Users     []string            `json:"users"`
}

type spec struct {
	Operator      string        `json:"operator"`
	SystemAccount string        `json:"system_account"`
	Accounts      []accountSpec `json:"accounts"`
}

type entity struct {
	Public string             `json:"public"`
	Seed   string             `json:"seed"`
	JWT    string             `json:"jwt"`
	Creds  string             `json:"creds,omitempty"`
	Users  map[string]*entity `json:"users,omitempty"`
}

type material struct {
	Operator *entity            `json:"operator"`
	Accounts map[string]*entity `json:"accounts"`
}

func newKey(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, *entity) {
	kp, err := create()
	check(err)
	public, err := kp.PublicKey()
	check(err)
	seed, err := kp.Seed()
	check(err)
	return kp, &entity{Public: public, Seed: string(seed)}
}

func makeMaterial(s spec) material {
	opKey, op := newKey(nkeys.CreateOperator)
	keys := map[string]nkeys.KeyPair{}
	out := material{Operator: op, Accounts: map[string]*entity{}}
	for _, a := range s.Accounts {
		keys[a.Name], out.Accounts[a.Name] = newKey(nkeys.CreateAccount)
	}
	for _, a := range s.Accounts {
		acc := out.Accounts[a.Name]
		claims := jwt.NewAccountClaims(acc.Public)
		claims.Name = a.Name
		if a.Name != s.SystemAccount {
			claims.Limits.JetStreamLimits = a.JetStream
		}
		claims.Exports = a.Exports
		for _, imp := range a.Imports {
			exporter, ok := out.Accounts[imp.Account]
			if !ok {
				check(fmt.Errorf("account %s imports from %q, which the spec does not name", a.Name, imp.Account))
			}
			imp.Account = exporter.Public
			claims.Imports.Add(imp)
		}
		acc.JWT = encode(claims, opKey)
		acc.Users = map[string]*entity{}
		for _, name := range a.Users {
			userKey, user := newKey(nkeys.CreateUser)
			uc := jwt.NewUserClaims(user.Public)
			uc.Name = name
			user.JWT = encode(uc, keys[a.Name])
			seed, err := userKey.Seed()
			check(err)
			creds, err := jwt.FormatUserConfig(user.JWT, seed)
			check(err)
			user.Creds = string(creds)
			acc.Users[name] = user
		}
	}
	oc := jwt.NewOperatorClaims(op.Public)
	oc.Name = s.Operator
	if sys, ok := out.Accounts[s.SystemAccount]; ok {
		oc.SystemAccount = sys.Public
	}
	op.JWT = encode(oc, opKey)
	return out
}

type encoder interface {
	Encode(kp nkeys.KeyPair) (string, error)
}

func encode(claims encoder, kp nkeys.KeyPair) string {
	token, err := claims.Encode(kp)
	check(err)
	return token
}

type issue struct {
	Description string `json:"description"`
	Blocking    bool   `json:"blocking"`
	TimeCheck   bool   `json:"time_check"`
}

type verdict struct {
	Type        string  `json:"type"`
	Subject     string  `json:"subject"`
	DecodeError string  `json:"decode_error,omitempty"`
	Issues      []issue `json:"issues"`
}

func verify(tokens []string) []verdict {
	verdicts := make([]verdict, 0, len(tokens))
	for _, token := range tokens {
		claims, err := jwt.Decode(token)
		if err != nil {
			verdicts = append(verdicts, verdict{DecodeError: err.Error(), Issues: []issue{}})
			continue
		}
		vr := jwt.CreateValidationResults()
		claims.Validate(vr)
		v := verdict{Type: string(claims.ClaimType()), Subject: claims.Claims().Subject, Issues: []issue{}}
		for _, i := range vr.Issues {
			v.Issues = append(v.Issues, issue{i.Description, i.Blocking, i.TimeCheck})
		}
		verdicts = append(verdicts, v)
	}
	return verdicts
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "jwtgen:", err)
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) != 2 {
		check(fmt.Errorf("usage: jwtgen make|verify < input.json"))
	}
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	var result any
	switch os.Args[1] {
	case "make":
		var s spec
		check(decoder.Decode(&s))
		result = makeMaterial(s)
	case "verify":
		var tokens []string
		check(decoder.Decode(&tokens))
		result = verify(tokens)
	default:
		check(fmt.Errorf("unknown mode %q: use make or verify", os.Args[1]))
	}
	check(json.NewEncoder(os.Stdout).Encode(result))
}
