{{- define "gpuctl.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuctl.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpuctl.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuctl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuctl.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpuctl.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "gpuctl.namespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- toJson .Values.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{- /* The operator's cost config (orchestrator/costs/budgets.py) as YAML, or "" without budgets. */ -}}
{{- define "gpuctl.costConfig" -}}
{{- $b := .Values.budgets -}}
{{- $watched := include "gpuctl.namespaces" . | fromJsonArray -}}
{{- range $ns, $_ := $b.namespaceTeams -}}
{{- if not (has $ns $watched) -}}
{{- fail (printf "budgets.namespaceTeams.%s: namespace %s is not watched; add it to watchNamespaces or remove it" $ns $ns) -}}
{{- end -}}
{{- end -}}
{{- $budgets := dict -}}
{{- if $b.teams -}}{{- $_ := set $budgets "teams" $b.teams -}}{{- end -}}
{{- if not (kindIs "invalid" $b.otherTeamsMonthlyUsd) -}}{{- $_ := set $budgets "other_teams_monthly_usd" $b.otherTeamsMonthlyUsd -}}{{- end -}}
{{- if $b.namespaceTeams -}}{{- $_ := set $budgets "namespace_teams" $b.namespaceTeams -}}{{- end -}}
{{- if $b.users -}}
{{- $users := dict -}}
{{- range $user, $limits := $b.users -}}
{{- $_ := set $users $user (include "gpuctl.userLimits" $limits | fromYaml) -}}
{{- end -}}
{{- $_ := set $budgets "users" $users -}}
{{- end -}}
{{- if $b.defaultUser -}}{{- $_ := set $budgets "default_user" (include "gpuctl.userLimits" $b.defaultUser | fromYaml) -}}{{- end -}}
{{- if $budgets -}}
{{- /* spend is summed over the GPUJobs of the watched namespaces, where the operator's Roles list them */ -}}
{{- $_ := set $budgets "spend_namespaces" $watched -}}
{{- dict "budgets" $budgets | toYaml -}}
{{- end -}}
{{- end -}}

{{- /* One user's limits (budgets.users.NAME, budgets.defaultUser) as the cost config spells them. */ -}}
{{- define "gpuctl.userLimits" -}}
{{- $out := dict -}}
{{- if hasKey . "monthlyUsd" -}}{{- $_ := set $out "monthly_usd" .monthlyUsd -}}{{- end -}}
{{- if hasKey . "hourlyUsd" -}}{{- $_ := set $out "hourly_usd" .hourlyUsd -}}{{- end -}}
{{- if hasKey . "maxJobs" -}}{{- $_ := set $out "max_jobs" .maxJobs -}}{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- /* The ledger database's URL, from the Secret named in database.existingSecret (never a value). */ -}}
{{- define "gpuctl.databaseEnv" -}}
- name: GPUCTL_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.secretKey }}
{{- end -}}
