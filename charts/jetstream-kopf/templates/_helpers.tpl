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
