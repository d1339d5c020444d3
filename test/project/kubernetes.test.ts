/*
 * deploy/kubernetes/ is what an operator applies with `kubectl apply -k`: every kustomization
 * names files that exist, every object is valid against the Kubernetes (and Istio) API schemas
 * of kubernetes-models, the service is configured only with variables it reads and values it
 * accepts, and the Deployment keeps the promises docs/kubernetes.md makes. Where kubectl is
 * installed, each kustomization is also built, and what it renders is checked the same way.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { parseAllDocuments } from 'yaml'
import { Deployment } from 'kubernetes-models/apps/v1'
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2'
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1'
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1'
import { AuthorizationPolicy, PeerAuthentication } from '@kubernetes-models/istio/security.istio.io/v1'
import { DestinationRule } from '@kubernetes-models/istio/networking.istio.io/v1'
import { parseConfig } from '../../lib/config/from-env.js'
import { workloadMatcher } from '../../lib/net/workload-identity.js'
import { registryFromJson } from '../../lib/tenants-file/load.js'
import { EnvSchema } from '../../schemas/env.js'
import { TEST_HMAC_KEYS } from '../helper.js'

const root = fileURLToPath(new URL('../../deploy/kubernetes/', import.meta.url))
const kustomizations = ['base', 'overlays/redis', 'examples/istio', 'examples/linkerd']

type Manifest = Record<string, any>

const MODELS: Record<string, new (data: any) => { validate: () => void }> = {
  'apps/v1 Deployment': Deployment,
  'v1 Service': Service,
  'v1 Secret': Secret,
  'v1 ConfigMap': ConfigMap,
  'policy/v1 PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2 HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'security.istio.io/v1 PeerAuthentication': PeerAuthentication,
  'security.istio.io/v1 AuthorizationPolicy': AuthorizationPolicy,
  'networking.istio.io/v1 DestinationRule': DestinationRule
}

function documents (text: string): Manifest[] {
  return parseAllDocuments(text).map((document) => document.toJS() as Manifest).filter((value) => value !== null)
}

function validate (t: Test, object: Manifest, where: string): void {
  const Model = MODELS[`${object.apiVersion} ${object.kind}`]
  if (Model === undefined) {
    t.fail(`${where}: ${object.apiVersion} ${object.kind} has no schema here`)
    return
  }
  // kustomize folds a Secret's base64 over several lines; Kubernetes' decoder skips line breaks.
  const data = object.kind === 'Secret' && object.data !== undefined ? { data: Object.fromEntries(Object.entries(object.data as Record<string, string>).map(([key, value]) => [key, value.replace(/\s+/g, '')])) } : {}
  t.doesNotThrow(() => { new Model({ ...object, ...data }).validate() }, `${where}: ${object.kind} ${object.metadata?.name} is valid`)
}

/** The files a kustomization names; patches are partial objects, checked once rendered. */
function kustomization (dir: string): { resources: string[], patches: string[], generated: string[] } {
  const file = documents(readFileSync(join(root, dir, 'kustomization.yaml'), 'utf8'))[0] ?? {}
  const generators = [...(file.secretGenerator ?? []), ...(file.configMapGenerator ?? [])] as Array<{ files?: string[] }>
  return {
    resources: file.resources ?? [],
    patches: (file.patches ?? []).map((patch: { path: string }) => patch.path),
    generated: generators.flatMap((generator) => (generator.files ?? []).map((entry) => entry.split('=').pop() ?? entry))
  }
}

const dockerfile = readFileSync(new URL('../../Dockerfile', import.meta.url), 'utf8')
const variables = new Set(Object.keys(EnvSchema.properties))

/** What docs/kubernetes.md promises of the service's Deployment and its companions. */
function checkService (t: Test, objects: Manifest[], where: string): void {
  const deployment = objects.find((object) => object.kind === 'Deployment' && object.metadata.name === 'email-otp')
  if (deployment === undefined) {
    t.fail(`${where}: no email-otp Deployment`)
    return
  }
  const pod = deployment.spec.template.spec
  const container = pod.containers.find((entry: Manifest) => entry.name === 'email-otp')
  const env = Object.fromEntries((container.env as Manifest[]).map((entry) => [entry.name, entry.value ?? `from ${Object.keys(entry.valueFrom ?? {}).join()}`]))
  t.same(Object.keys(env).filter((name) => !variables.has(name)), [], `${where}: every variable is one the service reads`)
  const values = { ...env, ...(env.OTP_HMAC_KEYS === undefined ? {} : { OTP_HMAC_KEYS: TEST_HMAC_KEYS }) }
  const config = parseConfig(values)
  t.same(config.metricsListener, { host: '0.0.0.0', port: 9464 }, `${where}: the internal listener on the pod IP`)
  const metricsPort = container.ports.find((port: Manifest) => port.name === 'metrics')?.containerPort
  t.equal(metricsPort, config.metricsListener?.port, `${where}: the metrics port is the internal listener's`)
  t.equal(deployment.spec.template.metadata.annotations['prometheus.io/port'], String(metricsPort), `${where}: Prometheus scrapes it`)
  t.match(container.readinessProbe, { httpGet: { path: '/readyz', port: 'metrics' } }, `${where}: readiness on /readyz, on the internal listener (never rate-limited)`)
  t.match(container.livenessProbe, { httpGet: { path: '/healthz', port: 'metrics' } }, `${where}: liveness on /healthz`)
  const drainDefault = (EnvSchema.properties as Record<string, { default?: unknown }>).SHUTDOWN_DRAIN_MS?.default
  const drainMs = env.SHUTDOWN_DRAIN_MS === undefined ? Number(drainDefault ?? 0) : Number(env.SHUTDOWN_DRAIN_MS)
  t.ok(pod.terminationGracePeriodSeconds * 1000 > drainMs + config.shutdownGraceMs + 5000, `${where}: terminationGracePeriodSeconds (${pod.terminationGracePeriodSeconds} s) is above drain (${drainMs} ms) + grace (${config.shutdownGraceMs} ms) with room to spare`)
  const user = /^USER (\d+):(\d+)$/m.exec(dockerfile)
  t.ok(user, 'the Dockerfile\'s user is numeric, so runAsNonRoot can be checked')
  t.match(pod.securityContext, { runAsNonRoot: true, runAsUser: Number(user?.[1]), runAsGroup: Number(user?.[2]) }, `${where}: non-root, the image's user`)
  t.not(Number(user?.[1]), 0)
  t.match(container.securityContext, { readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } }, `${where}: read-only root filesystem, no privileges`)
  t.ok(container.resources?.requests?.cpu !== undefined && container.resources?.requests?.memory !== undefined && container.resources?.limits?.memory !== undefined, `${where}: resources`)
  const mounts = Object.fromEntries((container.volumeMounts as Manifest[]).map((mount) => [mount.name, mount.mountPath]))
  const volumes = Object.fromEntries((pod.volumes as Manifest[]).map((volume) => [volume.name, volume]))
  t.equal(dirname(String(config.tenantsFile)), mounts.tenants, `${where}: TENANTS_FILE is in the mounted Secret`)
  t.ok(volumes.tenants?.secret?.secretName, `${where}: the tenants file (webhook secrets) comes from a Secret`)
  t.equal(dirname(String(config.blocklists.ipSources[0])), mounts.blocklists, `${where}: the block list is in the mounted ConfigMap`)
  t.ok(volumes.blocklists?.configMap?.name, `${where}: block lists come from a ConfigMap`)

  const labels = deployment.spec.template.metadata.labels as Record<string, string>
  const selects = (selector: Record<string, string> | undefined): boolean => selector !== undefined && Object.entries(selector).every(([key, value]) => labels[key] === value)
  const service = objects.find((object) => object.kind === 'Service' && object.metadata.name === 'email-otp')
  t.ok(selects(service?.spec.selector), `${where}: the Service selects the pods`)
  t.same(service?.spec.ports.map((port: Manifest) => port.targetPort), ['http'], `${where}: the Service exposes the API only, not the internal listener`)
  const budget = objects.find((object) => object.kind === 'PodDisruptionBudget')
  t.ok(selects(budget?.spec.selector.matchLabels), `${where}: the PodDisruptionBudget covers the pods`)
  for (const object of objects.filter((entry) => entry.apiVersion?.startsWith('security.istio.io/'))) {
    t.ok(selects(object.spec.selector.matchLabels), `${where}: ${object.kind} applies to the pods`)
  }
}

t.test('every kustomization names files that exist, and every object in them is valid', async (t) => {
  for (const dir of kustomizations) {
    const { resources, patches, generated } = kustomization(dir)
    for (const entry of [...resources, ...patches, ...generated]) {
      t.ok(existsSync(join(root, dir, entry)), `${dir}: ${entry} exists`)
    }
    for (const resource of resources.filter((entry) => entry.endsWith('.yaml'))) {
      for (const object of documents(readFileSync(join(root, dir, resource), 'utf8'))) validate(t, object, `${dir}/${resource}`)
    }
    for (const patch of patches) {
      const [object] = documents(readFileSync(join(root, dir, patch), 'utf8'))
      t.ok(object !== undefined && MODELS[`${object.apiVersion} ${object.kind}`] !== undefined, `${dir}/${patch} patches a known kind`)
    }
  }
  const unused = readdirSync(root, { recursive: true, encoding: 'utf8' })
    .filter((file) => /\.(ya?ml|json|txt)$/.test(file))
    .filter((file) => !kustomizations.some((dir) => {
      const { resources, patches, generated } = kustomization(dir)
      return file === join(dir, 'kustomization.yaml') || [...resources, ...patches, ...generated].some((entry) => join(dir, entry) === file)
    }))
  t.same(unused, [], 'no file is left out of every kustomization')
})

t.test('the base Deployment, as written: configuration, probes, shutdown, security', async (t) => {
  const objects = ['deployment.yaml', 'service.yaml', 'poddisruptionbudget.yaml'].flatMap((file) => documents(readFileSync(join(root, 'base', file), 'utf8')))
  checkService(t, objects, 'base')
  t.doesNotThrow(() => registryFromJson(JSON.parse(readFileSync(join(root, 'base/tenants.json'), 'utf8'))), 'the example tenants file loads')
  t.match(dockerfile, /^EXPOSE 3000 9464$/m, 'the image declares the API and the internal listener')
})

const kubectl = spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status === 0

t.test('each kustomization builds, and what it renders holds', { skip: kubectl ? false : 'kubectl is not installed' }, async (t) => {
  for (const dir of kustomizations) {
    const built = spawnSync('kubectl', ['kustomize', join(root, dir)], { encoding: 'utf8' })
    t.equal(built.status, 0, `${dir} builds${built.status === 0 ? '' : `: ${built.stderr}`}`)
    const objects = documents(built.stdout)
    for (const object of objects) validate(t, object, dir)
    checkService(t, objects, dir)
    const deployment = objects.find((object) => object.kind === 'Deployment' && object.metadata.name === 'email-otp')
    if (dir !== 'base') {
      t.equal(deployment?.spec.replicas, 3, `${dir}: three replicas`)
      t.ok(parseConfig({ ...Object.fromEntries(deployment?.spec.template.spec.containers[0].env.map((entry: Manifest) => [entry.name, entry.value ?? TEST_HMAC_KEYS])) }).redis, `${dir}: on Redis`)
      const hpa = objects.find((object) => object.kind === 'HorizontalPodAutoscaler')
      t.same(hpa?.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: 'email-otp' }, `${dir}: the autoscaler scales the Deployment`)
      const budget = objects.find((object) => object.kind === 'PodDisruptionBudget')?.spec
      t.same([budget?.minAvailable, budget?.maxUnavailable], [2, undefined], `${dir}: two of three stay through a drain`)
    }
    const annotations = deployment?.spec.template.metadata.annotations ?? {}
    const gateways = parseConfig({ ...Object.fromEntries(deployment?.spec.template.spec.containers[0].env.map((entry: Manifest) => [entry.name, entry.value ?? TEST_HMAC_KEYS])) }).meshGateways
    if (dir === 'examples/linkerd') {
      t.equal(annotations['linkerd.io/inject'], 'enabled', 'the Linkerd annotation')
      t.ok(gateways !== null, `${dir}: the ingress controller is named as a gateway, so its end users are not one source`)
    }
    if (dir === 'examples/istio') {
      t.equal(annotations['sidecar.istio.io/inject'], 'true')
      t.same(objects.filter((object) => object.apiVersion?.endsWith('istio.io/v1')).map((object) => object.kind).sort(), ['AuthorizationPolicy', 'DestinationRule', 'PeerAuthentication'])
      const allowed = objects.filter((object) => object.kind === 'AuthorizationPolicy').flatMap((policy) => policy.spec.rules.flatMap((rule: Manifest) => (rule.from ?? []).flatMap((from: Manifest) => from.source.principals ?? []))) as string[]
      const isGateway = workloadMatcher(gateways?.identities ?? [])
      t.same(allowed.filter((principal) => principal.includes('ingressgateway')).filter((principal) => !isGateway(`spiffe://${principal}`)), [], `${dir}: every ingress gateway the AuthorizationPolicy lets in is named in MESH_GATEWAY_IDENTITIES`)
      t.ok(allowed.some((principal) => isGateway(`spiffe://${principal}`)), `${dir}: and the gateway named is one it lets in`)
    }
  }
})
