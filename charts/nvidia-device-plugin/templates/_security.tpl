{{/*
Container privileges. The plugin needs CAP_SYS_ADMIN only when MIG or the
volume-mounts device list strategy may be in use; the chart decides that from
the values and, when they are unset, from the embedded config files.
*/}}

{{/*
The value, as JSON text, of the key of map $m whose lower-cased name is $want,
or "" when there is none. The plugin matches config keys such as "flags" and
"migStrategy" case-insensitively, so the chart does too when it reads
embedded configs.
Called with (list $m "key").
*/}}
{{- define "nvidia-device-plugin.foldGet" -}}
{{- $m := index . 0 -}}
{{- $want := index . 1 -}}
{{- $found := "" -}}
{{- if kindIs "map" $m -}}
{{- range $k, $v := $m -}}
{{- if eq (lower $k) $want -}}
{{- $found = toJson $v -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $found -}}
{{- end -}}

{{/*
Per embedded config, the migStrategy, deviceListStrategy and kubeletApi its
file sets, as JSON {"<name>": {"mig": <JSON text or "">, "dls": <JSON text
or "">, "api": <JSON text or "">, "ok": bool}}.
"ok" is false when the file (or its flags section) is not a YAML mapping, in
which case nothing can be concluded from it.
*/}}
{{- define "nvidia-device-plugin.embeddedFlags" -}}
{{- $out := dict -}}
{{- range $name, $text := .Values.config.map -}}
{{- $cfg := fromYaml (toString $text) -}}
{{- if hasKey $cfg "Error" -}}
{{- $_ := set $out $name (dict "ok" false) -}}
{{- else -}}
{{- $flagsJson := include "nvidia-device-plugin.foldGet" (list $cfg "flags") -}}
{{- $flags := dict -}}
{{- if and $flagsJson (ne $flagsJson "null") -}}
{{- $flags = fromJson (printf "{\"v\": %s}" $flagsJson) | dig "v" dict -}}
{{- end -}}
{{- $mig := include "nvidia-device-plugin.foldGet" (list $flags "migstrategy") -}}
{{- $pluginJson := include "nvidia-device-plugin.foldGet" (list $flags "plugin") -}}
{{- $plugin := dict -}}
{{- if and $pluginJson (ne $pluginJson "null") -}}
{{- $plugin = fromJson (printf "{\"v\": %s}" $pluginJson) | dig "v" dict -}}
{{- end -}}
{{- $dls := include "nvidia-device-plugin.foldGet" (list $plugin "deviceliststrategy") -}}
{{- $api := include "nvidia-device-plugin.foldGet" (list $plugin "kubeletapi") -}}
{{- $_ := set $out $name (dict "ok" (and (kindIs "map" $flags) (kindIs "map" $plugin)) "mig" $mig "dls" $dls "api" $api) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
"true" unless some config the plugin may run with enables MIG. The chart
reads the embedded configs; an external ConfigMap is opaque, so it may.
*/}}
{{- define "nvidia-device-plugin.allPossibleMigStrategiesAreNone" -}}
{{- $result := true -}}
{{- if .Values.migStrategy -}}
{{- if ne (toString .Values.migStrategy) "none" -}}
{{- $result = false -}}
{{- end -}}
{{- else if .Values.config.name -}}
{{- $result = false -}}
{{- else if .Values.config.map -}}
{{- range $name, $f := (include "nvidia-device-plugin.embeddedFlags" . | fromJson) -}}
{{- if not $f.ok -}}
{{- $result = false -}}
{{- else if and $f.mig (ne $f.mig "null") (ne $f.mig (toJson "none")) -}}
{{- $result = false -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $result -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when some config the plugin may run with lists volume-mounts among its
device list strategies (an external ConfigMap may).
*/}}
{{- define "nvidia-device-plugin.deviceListMayIncludeVolumeMounts" -}}
{{- $result := false -}}
{{- if .Values.deviceListStrategy -}}
{{- $result = contains "volume-mounts" (toString .Values.deviceListStrategy) -}}
{{- else if .Values.config.name -}}
{{- $result = true -}}
{{- else if .Values.config.map -}}
{{- range $name, $f := (include "nvidia-device-plugin.embeddedFlags" . | fromJson) -}}
{{- if or (not $f.ok) (contains "volume-mounts" (default "" $f.dls)) -}}
{{- $result = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $result -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the containers need CAP_SYS_ADMIN (MIG or volume-mounts). */}}
{{- define "nvidia-device-plugin.requiresCapSysAdmin" -}}
{{- if or (not (include "nvidia-device-plugin.allPossibleMigStrategiesAreNone" .)) (include "nvidia-device-plugin.deviceListMayIncludeVolumeMounts" .) -}}
true
{{- end -}}
{{- end -}}

{{/*
securityContext of the plugin container: the user's when given, privileged
for the static CPU manager policy, SYS_ADMIN only when required, otherwise no
privileges at all.
*/}}
{{- define "nvidia-device-plugin.securityContext" -}}
{{- if .Values.securityContext -}}
{{- toYaml .Values.securityContext -}}
{{- else if .Values.compatWithCPUManager -}}
privileged: true
{{- else if include "nvidia-device-plugin.requiresCapSysAdmin" . -}}
capabilities:
  add: ["SYS_ADMIN"]
{{- else -}}
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}
{{- end -}}

{{/* securityContext of the gpu-feature-discovery container. */}}
{{- define "gpu-feature-discovery.securityContext" -}}
{{- if .Values.gfd.securityContext -}}
{{- toYaml .Values.gfd.securityContext -}}
{{- else if include "nvidia-device-plugin.requiresCapSysAdmin" . -}}
capabilities:
  add: ["SYS_ADMIN"]
{{- else -}}
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}
{{- end -}}
