import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parse, stringify } from 'yaml'

/** The alerting rules as Prometheus reads them: the one file edited by hand. */
export const rulesPath = fileURLToPath(new URL('../deploy/prometheus/rules.yaml', import.meta.url))

/** The same rules for the Prometheus Operator, written from rulesPath by `npm run docs`. */
export const prometheusRulePath = fileURLToPath(new URL('../deploy/kubernetes/components/monitoring/prometheusrule.yaml', import.meta.url))

const HEADER = [
  '# Written by `npm run docs` from deploy/prometheus/rules.yaml: edit that file, not this one.',
  '# A Prometheus Operator picks this up when its ruleSelector matches: add the label yours',
  '# selects (kube-prometheus-stack: `release: <its release name>`) with a patch of your own.'
].join('\n')

/** The PrometheusRule (monitoring.coreos.com/v1) holding the rule groups of `rules` (rules.yaml's text). */
export function prometheusRule (rules: string = readFileSync(rulesPath, 'utf8')): string {
  const { groups } = parse(rules) as { groups: unknown[] }
  const object = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: { name: 'email-otp' },
    spec: { groups }
  }
  return `${HEADER}\n${stringify(object, { lineWidth: 0 })}`
}
