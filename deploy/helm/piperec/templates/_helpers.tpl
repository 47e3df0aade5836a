{{/* Name helpers for the piperec chart. */}}
{{- define "piperec.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "piperec.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "piperec.labels" -}}
app.kubernetes.io/name: {{ include "piperec.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "piperec.selectorLabels" -}}
app.kubernetes.io/name: {{ include "piperec.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Secret names of the trainer TLS certificate and token ("" = derived from the fullname). */}}
{{- define "piperec.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-trainer-tls" (include "piperec.fullname" .)) -}}
{{- end -}}

{{- define "piperec.tokenSecretName" -}}
{{- .Values.auth.token.secretName | default (printf "%s-trainer-token" (include "piperec.fullname" .)) -}}
{{- end -}}

{{/* .Values.config with sinks.trainer.tls / .auth of every pipeline pointing at
     the mounted Secrets (tls.enabled, auth.token.enabled), and http.tls when
     httpTls.enabled; keys the config already sets win. The chart owns the
     listen addresses (http.listen on service.metricsPort, the trainer sink
     on service.trainerPort when one pipeline has one: the probes, ports and
     Service use them; several keep their own ports, one per pipeline) and,
     when kafka.bootstrapServers is set, every pipeline's
     source.kafka.properties.bootstrap.servers; kafka.properties are added
     to every pipeline's source.kafka.properties (the pipeline's own keys
     win). */}}
{{- define "piperec.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $trainers := 0 -}}
{{- range $p := ($cfg.pipelines | default list) -}}
{{- if and $p.sinks (hasKey $p.sinks "trainer") -}}
{{- $trainers = add1 $trainers -}}
{{- end -}}
{{- end -}}
{{- range $p := ($cfg.pipelines | default list) -}}
{{- if or $.Values.kafka.bootstrapServers $.Values.kafka.properties -}}
{{- $src := $p.source | default dict -}}
{{- $k := $src.kafka | default dict -}}
{{- $props := merge ($k.properties | default dict) (deepCopy ($.Values.kafka.properties | default dict)) -}}
{{- if $.Values.kafka.bootstrapServers -}}
{{- $_ := set $props "bootstrap.servers" $.Values.kafka.bootstrapServers -}}
{{- end -}}
{{- $_ := set $k "properties" $props -}}
{{- $_ := set $src "kafka" $k -}}
{{- $_ := set $p "source" $src -}}
{{- end -}}
{{- if and $p.sinks (hasKey $p.sinks "trainer") -}}
{{- $tr := $p.sinks.trainer | default dict -}}
{{- if eq $trainers 1 -}}
{{- $_ := set $tr "listen" (printf "0.0.0.0:%v" $.Values.service.trainerPort) -}}
{{- end -}}
{{- if $.Values.tls.enabled -}}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $.Values.tls.mountPath) "key_file" (printf "%s/tls.key" $.Values.tls.mountPath) -}}
{{- if $.Values.tls.clientAuth -}}
{{- $_ := set $tls "ca_file" (printf "%s/ca.crt" $.Values.tls.mountPath) -}}
{{- end -}}
{{- $_ := set $tr "tls" (merge ($tr.tls | default dict) $tls) -}}
{{- end -}}
{{- if $.Values.auth.token.enabled -}}
{{- $auth := dict "token_file" (printf "%s/token" $.Values.auth.token.mountPath) -}}
{{- $_ := set $tr "auth" (merge ($tr.auth | default dict) $auth) -}}
{{- end -}}
{{- if and $.Values.unixSocket.enabled (not (hasKey $tr "unix_path")) -}}
{{- $_ := set $tr "unix_path" (printf "%s/trainer.sock" $.Values.unixSocket.mountPath) -}}
{{- end -}}
{{- $_ := set $p.sinks "trainer" $tr -}}
{{- end -}}
{{- end -}}
{{- $hl := $cfg.http | default dict -}}
{{- $_ := set $hl "listen" (printf "0.0.0.0:%v" .Values.service.metricsPort) -}}
{{- $_ := set $cfg "http" $hl -}}
{{- if .Values.httpTls.enabled -}}
{{- $http := $cfg.http | default dict -}}
{{- $htls := dict "cert_file" (printf "%s/tls.crt" .Values.httpTls.mountPath) "key_file" (printf "%s/tls.key" .Values.httpTls.mountPath) -}}
{{- $_ := set $http "tls" (merge ($http.tls | default dict) $htls) -}}
{{- $_ := set $cfg "http" $http -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "piperec.httpTlsSecretName" -}}
{{- .Values.httpTls.secretName | default (printf "%s-http-tls" (include "piperec.fullname" .)) -}}
{{- end -}}

{{/* The probes' scheme: HTTPS when httpTls.enabled. */}}
{{- define "piperec.probeScheme" -}}
{{- if .Values.httpTls.enabled }}, scheme: HTTPS{{ end -}}
{{- end -}}

{{/* `piperec serve` (serve.enabled): its own name and labels. The name label
     differs from the StatefulSet's (piperec-serve), so the StatefulSet, its
     Services, PDB, NetworkPolicy and ServiceMonitor, which select
     piperec.selectorLabels, never take the serve pods for pipeline pods. */}}
{{- define "piperec.serveFullname" -}}
{{- printf "%s-serve" (include "piperec.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{- define "piperec.serveSelectorLabels" -}}
app.kubernetes.io/name: {{ include "piperec.name" . }}-serve
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: serve
{{- end -}}

{{- define "piperec.serveLabels" -}}
{{ include "piperec.serveSelectorLabels" . }}
app.kubernetes.io/part-of: {{ include "piperec.name" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pipeline `piperec serve` answers for: serve.pipeline, or the
     config's first (serve's default without --pipeline), as YAML. Fails
     the render when serve.pipeline names none of config.pipelines. */}}
{{- define "piperec.servePipeline" -}}
{{- $pipelines := .Values.config.pipelines | default list -}}
{{- $pl := dict -}}
{{- if .Values.serve.pipeline -}}
{{- range $pipelines -}}
{{- if eq .name $.Values.serve.pipeline -}}
{{- $pl = . -}}
{{- end -}}
{{- end -}}
{{- if not $pl -}}
{{- fail (printf "serve.pipeline is %s but config.pipelines has no pipeline of that name" .Values.serve.pipeline) -}}
{{- end -}}
{{- else if $pipelines -}}
{{- $pl = first $pipelines -}}
{{- end -}}
{{- toYaml $pl -}}
{{- end -}}
