{{- define "jk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "jk.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "jk.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "jk.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "jk.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "jk.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "jk.selector" -}}
app.kubernetes.io/name: {{ include "jk.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "jk.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "jk.operatorName" -}}
{{ include "jk.fullname" . }}-operator
{{- end -}}

{{- define "jk.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{ default (include "jk.operatorName" .) .Values.operator.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.operator.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{- define "jk.brokerName" -}}
{{ include "jk.fullname" . }}-broker
{{- end -}}

{{- define "jk.authSecretName" -}}
{{ default (printf "%s-auth" (include "jk.brokerName" .)) .Values.broker.auth.existingSecret }}
{{- end -}}

{{/* "true" when the broker's first start creates the token Secret (not rendered: `helm template` stays stable). */}}
{{- define "jk.brokerCreatesToken" -}}
{{- if and .Values.broker.enabled .Values.broker.auth.enabled (not .Values.broker.auth.existingSecret) -}}
true
{{- end -}}
{{- end -}}

{{/* The NATS URL the operator uses by default: the in-chart broker's client Service, or nats.url. `namespace`:
the broker's namespace as the URL names it ($(POD_NAMESPACE) in the operator's env, so a rendered
manifest works in whatever namespace it is applied to). */}}
{{- define "jk.natsUrl" -}}
{{- if .root.Values.broker.enabled -}}
{{ ternary "tls" "nats" .root.Values.broker.tls.enabled }}://{{ include "jk.brokerName" .root }}.{{ .namespace }}.svc:{{ .root.Values.broker.service.port }}
{{- else -}}
{{ required "nats.url is required when broker.enabled is false" .root.Values.nats.url }}
{{- end -}}
{{- end -}}

{{/* The broker's TLS Secret; required when broker.tls.enabled (and the operator's client Secret with verify). */}}
{{- define "jk.brokerTlsSecret" -}}
{{- $t := .Values.broker.tls -}}
{{- if and $t.verify (not $t.operatorSecret) -}}
{{- fail "broker.tls.verify needs broker.tls.operatorSecret: a kubernetes.io/tls Secret with the operator's client certificate" -}}
{{- end -}}
{{ required "broker.tls.secretName is required when broker.tls.enabled is true: a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt" $t.secretName }}
{{- end -}}

{{/* topologySpreadConstraints as given; one without a labelSelector gets the component's own pod selector.
Arguments: root, component, constraints. */}}
{{- define "jk.topologySpread" -}}
{{- $selector := include "jk.selector" (dict "root" .root "component" .component) | fromYaml -}}
{{- range .constraints }}
{{- $c := . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $c = merge (dict "labelSelector" (dict "matchLabels" $selector)) $c }}
{{- end }}
- {{ toYaml $c | nindent 2 | trim }}
{{- end }}
{{- end -}}

{{/* A byteSize value (64MB, 1G, 1048576) as a nats-server config integer: K, M, G, T mean powers of 1024
as the chart has always read them, which nats-server writes KB, MB, GB, TB (its bare K is 1000). */}}
{{- define "jk.natsSize" -}}
{{- if regexMatch "^[0-9]+[KMGT]$" . -}}{{ . }}B{{- else -}}{{ . }}{{- end -}}
{{- end }}

{{/* The environment variable holding one account user's password (its Secret's value), referenced as
$NAME in the broker's configuration so the password never enters the ConfigMap. */}}
{{- define "jk.passwordEnv" -}}
JSBROKER_PASSWORD_{{ printf "%s/%s" .account .user | sha256sum | trunc 12 | upper }}
{{- end }}

{{/* Refuses broker.accounts / noAuthUser / systemAccount / configSecret values that the broker would refuse at start (or whose effect another value would silently override). */}}
{{- define "jk.checkAccounts" -}}
{{- $b := .Values.broker }}
{{- if and $b.auth.enabled (or $b.accounts $b.configSecret.name $b.noAuthUser $b.systemAccount) }}
{{- fail "broker.accounts, broker.noAuthUser, broker.systemAccount and broker.configSecret need broker.auth.enabled=false: nats-server refuses a token together with users (give each client an account user instead)" }}
{{- end }}
{{- $users := dict }}
{{- range $name, $acc := $b.accounts }}
{{- if or (hasPrefix "$" $name) (regexMatch "[\\s\"{}]" $name) }}
{{- fail (printf "broker.accounts: %q is not an account name you can give ($G and $SYS are the broker's own; no spaces, quotes or braces)" $name) }}
{{- end }}
{{- range $i, $u := ($acc.users | default list) }}
{{- if and $u.nkey (or $u.user $u.passwordSecret) }}
{{- fail (printf "broker.accounts.%s.users[%d]: give either nkey or user with passwordSecret, not both" $name $i) }}
{{- else if and (not $u.nkey) (not (and $u.user $u.passwordSecret)) }}
{{- fail (printf "broker.accounts.%s.users[%d]: needs user and passwordSecret: {name, key} (or an nkey)" $name $i) }}
{{- end }}
{{- $id := $u.nkey | default $u.user }}
{{- if hasKey $users $id }}
{{- fail (printf "broker.accounts.%s.users[%d]: %s is already a user of account %s; a user belongs to one account" $name $i $id (get $users $id)) }}
{{- end }}
{{- $_ := set $users $id $name }}
{{- end }}
{{- end }}
{{- with $b.systemAccount }}
{{- if $b.configSecret.name }}
{{- fail (printf "broker.systemAccount cannot go with broker.configSecret: the Secret's fragment is included after it and a system_account there would silently win; write system_account: %q in that fragment instead" .) }}
{{- else if not (hasKey $b.accounts .) }}
{{- fail (printf "broker.systemAccount: %q is not an account of broker.accounts (%s); name one of them, or leave it empty for $SYS, which nobody can log in to" . (keys $b.accounts | sortAlpha | join ", " | default "none")) }}
{{- else if (get $b.accounts .).jetstream | default dict | dig "enabled" false }}
{{- fail (printf "broker.accounts.%s.jetstream: the system account cannot have JetStream (nats-server will not start: \"Not allowed to enable JetStream on the system account\"); put the streams in another account" .) }}
{{- end }}
{{- end }}
{{- if and $b.noAuthUser (not $b.configSecret.name) (not (hasKey $users $b.noAuthUser)) }}
{{- fail (printf "broker.noAuthUser: %q is not a user of broker.accounts; name one of theirs (%s)" $b.noAuthUser (keys $users | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
