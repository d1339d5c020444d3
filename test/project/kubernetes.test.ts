/*
 * deploy/kubernetes/ is what an operator applies with `kubectl apply -k`: every kustomization
 * names files that exist, every object is valid against the Kubernetes (and Istio) API schemas
 * of kubernetes-models, the service is configured only with variables it reads and values it
 * accepts, and the Deployment keeps the promises docs/kubernetes.md makes. Where kubectl is
 * installed, each kustomization is also built, and what it renders is checked the same way.
 */
import { spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { createConnection } from 'node:net'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { parse, parseAllDocuments } from 'yaml'
import { Deployment } from 'kubernetes-models/apps/v1'
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2'
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1'
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1'
import { ConfigMap, PersistentVolumeClaim, Secret, Service } from 'kubernetes-models/v1'
import { AuthorizationPolicy, PeerAuthentication } from '@kubernetes-models/istio/security.istio.io/v1'
import { DestinationRule } from '@kubernetes-models/istio/networking.istio.io/v1'
import { parseConfig } from '../../lib/config/from-env.js'
import { workloadMatcher } from '../../lib/net/workload-identity.js'
import { registryFromJson } from '../../lib/tenants-file/load.js'
import { EnvSchema } from '../../schemas/env.js'
import { prometheusRule, prometheusRulePath, rulesPath } from '../../scripts/prometheus-rule.js'
import { TEST_HMAC_KEYS } from '../helper.js'
import { connectFailFast, redisAvailable, startRedis } from '../support/redis.js'

const root = fileURLToPath(new URL('../../deploy/kubernetes/', import.meta.url))
const kustomizations = ['base', 'overlays/managed-redis', 'overlays/redis', 'examples/istio', 'examples/linkerd', 'examples/prometheus-operator']
/** Kustomize components: parts an overlay adds, not built alone. */
const components = ['components/monitoring']

type Manifest = Record<string, any>

/**
 * The Prometheus Operator's rule object, checked for the shape its CRD requires; the rules
 * themselves are checked by promtool (below).
 */
class PrometheusRule {
  readonly #object: Manifest
  constructor (object: Manifest) { this.#object = object }
  validate (): void {
    const { metadata, spec } = this.#object
    if (typeof metadata?.name !== 'string' || !Array.isArray(spec?.groups)) throw new Error('a PrometheusRule needs metadata.name and spec.groups')
    for (const group of spec.groups as Manifest[]) {
      if (typeof group.name !== 'string' || !Array.isArray(group.rules)) throw new Error('each group needs a name and rules')
      for (const rule of group.rules as Manifest[]) {
        if (typeof rule.expr !== 'string' || (typeof rule.alert !== 'string') === (typeof rule.record !== 'string')) throw new Error(`a rule needs an expr and one of alert or record: ${JSON.stringify(rule)}`)
      }
    }
  }
}

const MODELS: Record<string, new (data: any) => { validate: () => void }> = {
  'apps/v1 Deployment': Deployment,
  'v1 Service': Service,
  'v1 Secret': Secret,
  'v1 ConfigMap': ConfigMap,
  'v1 PersistentVolumeClaim': PersistentVolumeClaim,
  'networking.k8s.io/v1 NetworkPolicy': NetworkPolicy,
  'policy/v1 PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2 HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'security.istio.io/v1 PeerAuthentication': PeerAuthentication,
  'security.istio.io/v1 AuthorizationPolicy': AuthorizationPolicy,
  'networking.istio.io/v1 DestinationRule': DestinationRule,
  'monitoring.coreos.com/v1 PrometheusRule': PrometheusRule
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
function kustomization (dir: string): { resources: string[], patches: string[], generated: string[], components: string[] } {
  const file = documents(readFileSync(join(root, dir, 'kustomization.yaml'), 'utf8'))[0] ?? {}
  const generators = [...(file.secretGenerator ?? []), ...(file.configMapGenerator ?? [])] as Array<{ files?: string[] }>
  return {
    resources: file.resources ?? [],
    patches: (file.patches ?? []).map((patch: { path: string }) => patch.path),
    components: file.components ?? [],
    generated: generators.flatMap((generator) => (generator.files ?? []).map((entry) => entry.split('=').pop() ?? entry))
  }
}

/** Values standing in for what the Secrets hold, which the operator creates (docs/kubernetes.md). */
const SECRET_SAMPLES: Record<string, string> = { OTP_HMAC_KEYS: TEST_HMAC_KEYS, REDIS_URL: 'redis://:sample-password@email-otp-redis:6379' }

/**
 * The environment the service would see in `container`: a variable from a Secret, and one read
 * from a file (`<NAME>_FILE`) in a mounted Secret, take the sample value of their variable.
 */
function serviceEnvironment (t: Test, pod: Manifest, container: Manifest, where: string): Record<string, string> {
  const secretDirs = new Map((pod.volumes as Manifest[]).filter((volume) => volume.secret !== undefined).map((volume) => [volume.name, volume.secret]))
  const env: Record<string, string> = {}
  for (const entry of container.env as Manifest[]) {
    const name = String(entry.name)
    if (entry.valueFrom !== undefined) {
      t.ok(entry.valueFrom.secretKeyRef !== undefined && SECRET_SAMPLES[name] !== undefined, `${where}: ${name} comes from a Secret`)
      env[name] = SECRET_SAMPLES[name] ?? ''
      continue
    }
    const secret = /^(.+)_FILE$/.exec(name)?.[1]
    if (secret !== undefined && SECRET_SAMPLES[secret] !== undefined) {
      const mounted = (container.volumeMounts as Manifest[]).find((candidate) => candidate.mountPath === dirname(String(entry.value)))
      const volume = secretDirs.get(mounted?.name)
      t.ok(volume !== undefined && (volume.items === undefined || (volume.items as Manifest[]).some((item) => item.path === basename(String(entry.value)))), `${where}: ${name} is a file of a mounted Secret`)
      env[secret] = SECRET_SAMPLES[secret]
      continue
    }
    env[name] = String(entry.value)
  }
  return env
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
  const values = serviceEnvironment(t, pod, container, where)
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
  for (const dir of [...kustomizations, ...components]) {
    const { resources, patches, generated, components: used } = kustomization(dir)
    for (const entry of used) t.ok(components.includes(join(dir, entry)), `${dir}: ${entry} is a component of the repository`)
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
    .filter((file) => ![...kustomizations, ...components].some((dir) => {
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

/**
 * The Istio example's policies, as written: the internal listener (tenants' volumes and
 * allowances on /metrics) answers Prometheus's principal alone, never anyone in the cluster,
 * and no side door serves what it holds: no plain-text port, no metrics merged into the
 * sidecar agent's. The kubelet's probes go through that agent, which Istio rewrites them to.
 */
t.test('examples/istio: the metrics port only for Prometheus\'s principal, mutual TLS everywhere, no merged metrics', async (t) => {
  const dir = join(root, 'examples/istio')
  const [base] = documents(readFileSync(join(root, 'base/deployment.yaml'), 'utf8'))
  const container = base?.spec.template.spec.containers.find((entry: Manifest) => entry.name === 'email-otp')
  const metricsPort = String(container?.ports.find((port: Manifest) => port.name === 'metrics')?.containerPort)
  const apiPort = String(container?.ports.find((port: Manifest) => port.name === 'http')?.containerPort)
  const [policy] = documents(readFileSync(join(dir, 'authorizationpolicy.yaml'), 'utf8'))
  t.equal(policy?.spec.action, 'ALLOW')
  const rules = (policy?.spec.rules ?? []) as Manifest[]
  const reaches = (rule: Manifest, port: string): boolean => (rule.to ?? []).some((to: Manifest) => (to.operation?.ports ?? [port]).includes(port))
  for (const port of [metricsPort, apiPort]) {
    const open = rules.filter((rule) => reaches(rule, port) && !(rule.from ?? []).some((from: Manifest) => (from.source?.principals ?? []).length > 0))
    t.same(open, [], `port ${port}: every rule that reaches it names the principals it lets in`)
  }
  const metricsRules = rules.filter((rule) => reaches(rule, metricsPort))
  t.same(metricsRules.flatMap((rule) => (rule.from ?? []).flatMap((from: Manifest) => from.source?.principals ?? [])), ['cluster.local/ns/monitoring/sa/prometheus'], 'the metrics port: Prometheus\'s service account, the placeholder docs/kubernetes.md names')
  t.same(metricsRules.flatMap((rule) => (rule.to ?? []).flatMap((to: Manifest) => [to.operation?.methods, to.operation?.paths])), [['GET'], ['/metrics']], 'GET /metrics only: the probes\' paths need no rule')

  const [peer] = documents(readFileSync(join(dir, 'peerauthentication.yaml'), 'utf8'))
  t.equal(peer?.spec.mtls?.mode, 'STRICT')
  t.same(Object.values(peer?.spec.portLevelMtls ?? {}).filter((level: any) => level.mode !== 'STRICT'), [], 'no port takes plain text, where no principal can be checked')

  const [patch] = documents(readFileSync(join(dir, 'deployment.yaml'), 'utf8'))
  const annotations = patch?.spec.template.metadata.annotations ?? {}
  t.equal(annotations['prometheus.istio.io/merge-metrics'], 'false', 'the sidecar\'s agent does not serve the metrics in plain text on :15020')
  t.not(annotations['sidecar.istio.io/rewriteAppHTTPProbers'], 'false', 'the probes are rewritten to the sidecar\'s agent (Istio\'s default)')
  t.match(container?.readinessProbe, { httpGet: { port: 'metrics' } }, 'HTTP probes, which Istio rewrites')
})

/** Every label selector of an object, with where it is: workloads, Services, budgets, spread constraints, policies. */
function selectorsOf (object: Manifest): Array<[string, Record<string, string>]> {
  const found: Array<[string, Record<string, string>]> = []
  const walk = (value: unknown, path: string): void => {
    if (Array.isArray(value)) {
      value.forEach((item, index) => { walk(item, `${path}/${index}`) })
      return
    }
    if (typeof value !== 'object' || value === null) return
    for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
      if (key === 'matchLabels' || (key === 'selector' && object.kind === 'Service')) found.push([`${path}/${key}`, inner as Record<string, string>])
      else walk(inner, `${path}/${key}`)
    }
  }
  walk(object.spec, `${object.kind} ${object.metadata.name}: spec`)
  return found
}

/**
 * Each selector names this application (app.kubernetes.io/part-of: email-otp), so it cannot
 * take another application's pods in the namespace, and takes the pods of exactly one of the
 * workloads rendered; a workload's own selector takes its own.
 */
function checkSelectors (t: Test, objects: Manifest[], where: string): void {
  const workloads = objects.filter((object) => object.kind === 'Deployment')
  for (const object of objects) {
    for (const [path, selector] of selectorsOf(object)) {
      t.equal(selector?.['app.kubernetes.io/part-of'], 'email-otp', `${where}: ${path} names the application`)
      const selected = workloads.filter((workload) => Object.entries(selector ?? {}).every(([key, value]) => workload.spec.template.metadata.labels?.[key] === value)).map((workload) => workload.metadata.name)
      t.equal(selected.length, 1, `${where}: ${path} takes the pods of one workload (${selected.join(', ') || 'none'})`)
      if (object.kind === 'Deployment' && path.endsWith('spec/selector/matchLabels')) t.same(selected, [object.metadata.name], `${where}: ${path} takes its own pods`)
    }
  }
}

/** Every image pinned: an exact version or a digest, never a floating tag. */
function checkImages (t: Test, objects: Manifest[], where: string): void {
  for (const workload of objects.filter((object) => object.kind === 'Deployment')) {
    const pod = workload.spec.template.spec
    for (const container of [...(pod.initContainers ?? []), ...pod.containers] as Manifest[]) {
      t.match(container.image, /(:\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?|@sha256:[0-9a-f]{64})$/, `${where}: ${workload.metadata.name}/${container.name} pins its image (${String(container.image)})`)
    }
  }
}

const kubectl = spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status === 0

t.test('each kustomization builds, and what it renders holds', { skip: kubectl ? false : 'kubectl is not installed' }, async (t) => {
  for (const dir of kustomizations) {
    const built = spawnSync('kubectl', ['kustomize', join(root, dir)], { encoding: 'utf8' })
    t.equal(built.status, 0, `${dir} builds${built.status === 0 ? '' : `: ${built.stderr}`}`)
    const objects = documents(built.stdout)
    for (const object of objects) validate(t, object, dir)
    checkService(t, objects, dir)
    checkSelectors(t, objects, dir)
    checkImages(t, objects, dir)
    const deployment = objects.find((object) => object.kind === 'Deployment' && object.metadata.name === 'email-otp')
    const serviceEnv = serviceEnvironment(t, deployment?.spec.template.spec, deployment?.spec.template.spec.containers[0], dir)
    if (dir !== 'base') {
      t.ok(parseConfig(serviceEnv).redis, `${dir}: on Redis`)
      t.equal(serviceEnv.REDIS_URL, SECRET_SAMPLES.REDIS_URL, `${dir}: the Redis URL, password included, from a file of a mounted Secret (REDIS_URL_FILE)`)
      const hpa = objects.find((object) => object.kind === 'HorizontalPodAutoscaler')
      t.same(hpa?.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: 'email-otp' }, `${dir}: the autoscaler scales the Deployment`)
      const budget = objects.find((object) => object.kind === 'PodDisruptionBudget')?.spec
      t.same([budget?.minAvailable, budget?.maxUnavailable], [2, undefined], `${dir}: two of three stay through a drain`)
    }
    const annotations = deployment?.spec.template.metadata.annotations ?? {}
    const gateways = parseConfig(serviceEnv).meshGateways
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

t.test('overlays: no replica count beside the autoscaler; the example Redis with a password, a NetworkPolicy and its append-only file on a volume, as redis-server runs it', { skip: kubectl ? false : 'kubectl is not installed' }, async (t) => {
  for (const dir of kustomizations.filter((entry) => entry !== 'base')) {
    const objects = documents(spawnSync('kubectl', ['kustomize', join(root, dir)], { encoding: 'utf8' }).stdout)
    for (const hpa of objects.filter((object) => object.kind === 'HorizontalPodAutoscaler')) {
      const target = objects.find((object) => object.kind === hpa.spec.scaleTargetRef.kind && object.metadata.name === hpa.spec.scaleTargetRef.name)
      t.ok(target !== undefined && !('replicas' in target.spec), `${dir}: ${String(hpa.spec.scaleTargetRef.name)} has no replica count beside its autoscaler (apply never scales it back)`)
    }
  }

  const objects = documents(spawnSync('kubectl', ['kustomize', join(root, 'overlays/redis')], { encoding: 'utf8' }).stdout)
  const redis = objects.find((object) => object.kind === 'Deployment' && object.metadata.name === 'email-otp-redis')
  const service = objects.find((object) => object.kind === 'Deployment' && object.metadata.name === 'email-otp')
  const pod = redis?.spec.template.spec
  const container = pod?.containers[0] as Manifest
  const args = container.args as string[]
  const passwordVariable = /^\$\(([A-Z_]+)\)$/.exec(args[args.indexOf('--requirepass') + 1] ?? '')?.[1]
  const passwordFrom = (container.env as Manifest[]).find((entry) => entry.name === passwordVariable)?.valueFrom?.secretKeyRef
  t.ok(passwordFrom, 'Redis requires a password, from a Secret (never written in the manifest)')
  const urlSecret = (service?.spec.template.spec.volumes as Manifest[]).find((volume) => volume.name === 'redis')?.secret
  t.equal(urlSecret?.secretName, passwordFrom?.name, 'the Secret the service reads its Redis URL from (REDIS_URL_FILE) holds that password')
  t.same((container.env as Manifest[]).find((entry) => entry.name === 'REDISCLI_AUTH')?.valueFrom?.secretKeyRef, passwordFrom, 'the readiness probe\'s redis-cli authenticates')

  const labels = (name: string): Record<string, string> => objects.find((object) => object.kind === 'Deployment' && object.metadata.name === name)?.spec.template.metadata.labels
  const policy = objects.find((object) => object.kind === 'NetworkPolicy')
  t.same(policy?.spec.podSelector.matchLabels, redis?.spec.selector.matchLabels, 'a NetworkPolicy covers the Redis pods')
  t.same(policy?.spec.policyTypes, ['Ingress'])
  const peers = (policy?.spec.ingress as Manifest[]).flatMap((rule) => rule.from as Manifest[])
  t.same(peers.map((peer) => Object.keys(peer)), [['podSelector']], 'admitting pods of this namespace only, by one selector')
  t.ok(Object.entries(peers[0]?.podSelector.matchLabels as Record<string, string>).every(([key, value]) => labels('email-otp')[key] === value), 'the service\'s pods')
  t.same((policy?.spec.ingress as Manifest[]).flatMap((rule) => rule.ports), [{ protocol: 'TCP', port: 'redis' }], 'on the Redis port alone')

  const dataDir = args[args.indexOf('--dir') + 1]
  t.equal(args[args.indexOf('--appendonly') + 1], 'yes', 'an append-only file')
  const mount = (container.volumeMounts as Manifest[]).find((entry) => entry.mountPath === dataDir)
  const claim = (pod.volumes as Manifest[]).find((volume) => volume.name === mount?.name)?.persistentVolumeClaim?.claimName
  t.ok(objects.some((object) => object.kind === 'PersistentVolumeClaim' && object.metadata.name === claim), `in ${String(dataDir)}, on a PersistentVolumeClaim of the overlay`)

  if (!redisAvailable) return
  // The container's arguments as the kubelet expands them, the data folder a temporary one.
  const password = 'a-password-for-this-test'
  const dataFolder = t.testdir({})
  const server = await startRedis(args.map((arg) => arg === `$(${passwordVariable ?? ''})` ? password : arg === dataDir ? dataFolder : arg))
  t.teardown(async () => { await server.stop() })
  const socket = createConnection(server.port, '127.0.0.1')
  socket.write('PING\r\n')
  const [answer] = await once(socket, 'data') as [Buffer]
  socket.destroy()
  t.match(answer.toString(), /^-NOAUTH/, 'without the password, Redis refuses')
  const client = await connectFailFast(server.url.replace('redis://', `redis://:${password}@`))
  t.teardown(() => { client.disconnect() })
  t.equal(await client.ping(), 'PONG', 'with it, Redis answers')
  t.same(await client.config('GET', 'appendonly'), ['appendonly', 'yes'])
  t.same(await client.config('GET', 'maxmemory-policy'), ['maxmemory-policy', 'noeviction'], 'and never evicts a key')
})

t.test('docs/kubernetes.md\'s overlay of your own, as written: your tenants file, outside the repository, in the Secret', { skip: kubectl ? false : 'kubectl is not installed' }, async (t) => {
  const guide = readFileSync(new URL('../../docs/kubernetes.md', import.meta.url), 'utf8')
  const snippet = /```yaml\n(# my-email-otp\/kustomization\.yaml[^\n]*\n[\s\S]*?)```/.exec(guide)?.[1]
  t.ok(snippet, 'the guide shows the overlay')
  // The reader's folders: their overlay beside their checkout, as the snippet's path has it.
  const place = mkdtempSync(join(tmpdir(), 'email-otp-kustomize-'))
  t.teardown(() => { rmSync(place, { recursive: true, force: true }) })
  symlinkSync(fileURLToPath(new URL('../..', import.meta.url)), join(place, 'email-otp'))
  mkdirSync(join(place, 'my-email-otp'))
  const tenants = JSON.stringify({ tiers: { standard: { allowance: 100, window: '1d', sandboxAllowance: 100 } }, tenants: [{ id: 'mine', tier: 'standard', keys: [{ id: 'k', kind: 'secret', mode: 'live', sha256: 'a'.repeat(64) }] }] })
  writeFileSync(join(place, 'my-email-otp', 'tenants.json'), tenants)
  writeFileSync(join(place, 'my-email-otp', 'kustomization.yaml'), snippet ?? '')
  const built = spawnSync('kubectl', ['kustomize', join(place, 'my-email-otp')], { encoding: 'utf8' })
  t.equal(built.status, 0, `it builds${built.status === 0 ? '' : `: ${built.stderr}`}`)
  const objects = documents(built.stdout)
  checkService(t, objects, 'your overlay')
  const secrets = objects.filter((object) => object.kind === 'Secret')
  t.same(secrets.map((secret) => secret.metadata.name), ['email-otp-tenants'], 'one tenants Secret, its name kept (the mounted file is updated in place)')
  t.equal(Buffer.from(String(secrets[0]?.data?.['tenants.json']).replace(/\s+/g, ''), 'base64').toString(), tenants, 'holding your file, not the example')
  const deployment = objects.find((object) => object.kind === 'Deployment' && object.metadata.name === 'email-otp')
  t.equal(deployment?.spec.template.spec.containers[0].image, 'registry.example.com/email-otp:1.2.0', 'and your image')
})

t.test('the PrometheusRule holds deploy/prometheus/rules.yaml\'s groups as `npm run docs` writes them, and renders unchanged', async (t) => {
  t.equal(readFileSync(prometheusRulePath, 'utf8'), prometheusRule(), 'written from rules.yaml (run `npm run docs` after editing it)')
  const { groups } = parse(readFileSync(rulesPath, 'utf8')) as { groups: unknown[] }
  const [written] = documents(readFileSync(prometheusRulePath, 'utf8'))
  t.same(written?.spec.groups, groups, 'the same groups, rule for rule')
  if (!kubectl) return
  const rendered = documents(spawnSync('kubectl', ['kustomize', join(root, 'examples/prometheus-operator')], { encoding: 'utf8' }).stdout)
  const rules = rendered.filter((object) => object.kind === 'PrometheusRule')
  t.equal(rules.length, 1, 'the example renders one PrometheusRule')
  t.same(rules[0]?.spec.groups, groups, 'kustomize changes none of its rules')
})
