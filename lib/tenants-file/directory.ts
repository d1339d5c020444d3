import { watch, type FSWatcher } from 'node:fs'
import { dirname } from 'node:path'
import type { Logger } from 'pino'
import { CheckedParts } from '../mail/templating/tenant-templates.js'
import { problemPointer, type TenantRegistry } from '../tenants/registry.js'
import { demoRegistry } from './demo.js'
import { BuiltLists } from './lists.js'
import { DEFAULT_TENANTS_FILE_MAX_BYTES, readTenantsFile, registryFromFile, TenantsFileError, tenantsFileVersion } from './load.js'
import { LoadTurns } from './turns.js'

export type ReloadResult = { ok: true, tenants: number } | { ok: false, error: string }

/** What started a reload: SIGHUP, or a change seen in the tenants file's folder. */
export type ReloadTrigger = 'signal' | 'watch'

export interface TenantsFileStatus {
  /** The version of the file in force (tenantsFileVersion); null for the built-in demo tenant. */
  version: string | null
  /** Reloads since start, by result. */
  reloads: { ok: number, failed: number }
  /** Whether the last load succeeded: true from start (a file that does not load stops it) until a reload fails. */
  lastReloadOk: boolean
}

/**
 * One line per refused tenant, naming it, the JSON pointers of its problems and each problem's
 * rule (rules name places and limits, never a value of the file).
 */
function logRefused (registry: TenantRegistry, log: Pick<Logger, 'error'>): void {
  for (const refused of registry.refused.values()) {
    const message = refused.serving === 'previous'
      ? 'tenant refused: its entry in the tenants file breaks a rule; it keeps its last good configuration (email-otp tenants check lists the problems)'
      : 'tenant refused: its entry in the tenants file breaks a rule; its keys answer 503 TENANT_MISCONFIGURED (email-otp tenants check lists the problems)'
    log.error({ tenant: refused.id, pointers: refused.problems.map(problemPointer), problems: refused.problems, serving: refused.serving, version: registry.version }, message)
  }
}

/** How many template parts a load checked, and how many it took unchanged from the load before. */
function templateCounts (parts: CheckedParts): { checked: number, reused: number } {
  return { checked: parts.checked, reused: parts.reused }
}

/** What a load cost the event loop: its turns, the most units one counted, the most CPU time one took. */
function turnFigures (turns: LoadTurns): { count: number, longestUnits: number, longestCpuMs: number } {
  return { count: turns.count, longestUnits: turns.longestUnits, longestCpuMs: Math.round(turns.longestCpuMs * 10) / 10 }
}

export interface TenantDirectory {
  /** The registry in force; replaced whole by a successful reload. */
  readonly current: TenantRegistry
  /**
   * Re-reads TENANTS_FILE; a file with a problem that is not one tenant's leaves the current
   * registry in place; a tenant the new file gets wrong keeps its last good configuration.
   */
  reload (trigger?: ReloadTrigger): Promise<ReloadResult>
  status (): TenantsFileStatus
}

export interface TenantsSource {
  /** TENANTS_FILE; null serves the built-in demo tenant. */
  tenantsFile: string | null
  templatesDir: string | null
  /** TENANTS_FILE_MAX_BYTES: a larger file is refused unread (at start, the service does not start). */
  tenantsFileMaxBytes?: number
}

/**
 * How long the folder must be quiet before a change is read: Kubernetes updates a mounted
 * ConfigMap or Secret as several renames (a new timestamped folder, then `..data` swapped),
 * and an editor writes a temporary file then renames it.
 */
const WATCH_DEBOUNCE_MS = 300

/**
 * The tenants file (TENANTS_FILE), reloaded on request (SIGHUP, server.ts) and whenever its
 * folder changes, until `close`. The folder is watched rather than the file: a mounted
 * ConfigMap or Secret is a symlink through `..data`, which Kubernetes swaps atomically, and a
 * watch on the file would keep following the old inode. A change whose bytes hash to the
 * version in force is ignored; any other goes through the same validation as SIGHUP, and a
 * file that does not validate keeps the previous tenants (logged, and counted in the metrics).
 * A file that does not load at start rejects (TenantsFileError): the service does not start.
 */
export async function openTenantDirectory (source: TenantsSource, log: Pick<Logger, 'info' | 'warn' | 'error'>): Promise<TenantDirectory & { close: () => void }> {
  const path = source.tenantsFile
  const options = {
    ...(source.templatesDir === null ? {} : { templatesDir: source.templatesDir }),
    ...(source.tenantsFileMaxBytes === undefined ? {} : { maxBytes: source.tenantsFileMaxBytes })
  }
  // The template parts the registry in force was built with: a reload checks only the parts
  // that changed, and takes the others from here.
  let checkedParts = new CheckedParts()
  // The same for lists (networks, domains, origins): an unchanged list is neither checked nor built again.
  let builtLists = new BuiltLists()
  const turns = new LoadTurns()
  let current = path === null ? demoRegistry() : await registryFromFile(path, { ...options, checkedParts, builtLists, turns })
  for (const warning of current.warnings) log.warn(warning)
  if (path === null) {
    log.warn('TENANTS_FILE is not set: serving the built-in demo tenant (sandbox keys only, no real mail)')
  } else {
    log.info({ tenants: current.tenants.size, refused: current.refused.size, templates: templateCounts(checkedParts), lists: { built: builtLists.built, reused: builtLists.reused }, turns: turnFigures(turns), version: current.version }, 'tenants file loaded')
    logRefused(current, log)
  }
  const reloads = { ok: 0, failed: 0 }
  let lastReloadOk = true
  // One reload at a time: a signal during a watched reload waits for it, then reads again.
  let queue: Promise<unknown> = Promise.resolve()

  const reloadNow = async (file: string, trigger: ReloadTrigger): Promise<ReloadResult> => {
    // The registry in force serves every request until the new one is complete.
    log.info({ version: current.version, trigger }, 'tenants file reload started; the tenants in force serve until it ends')
    const attempt = new CheckedParts(checkedParts)
    const lists = new BuiltLists(builtLists)
    const turns = new LoadTurns()
    try {
      current = await registryFromFile(file, { ...options, checkedParts: attempt, builtLists: lists, turns }, current)
      checkedParts = attempt
      builtLists = lists
      for (const warning of current.warnings) log.warn(warning)
      reloads.ok++
      lastReloadOk = true
      log.info({ tenants: current.tenants.size, refused: current.refused.size, templates: templateCounts(attempt), lists: { built: lists.built, reused: lists.reused }, turns: turnFigures(turns), version: current.version, trigger }, 'tenants file reloaded')
      logRefused(current, log)
      return { ok: true, tenants: current.tenants.size }
    } catch (error) {
      const message = (error as Error).message
      reloads.failed++
      lastReloadOk = false
      // Every problem of the file, so that one reload shows all there is to fix.
      const problems = error instanceof TenantsFileError ? error.problems : [message]
      log.error({ reason: message, problems, version: current.version, trigger }, 'tenants file reload failed; keeping the previous tenants')
      return { ok: false, error: message }
    }
  }

  let timer: NodeJS.Timeout | undefined
  let watcher: FSWatcher | null = null
  const directory = {
    get current () { return current },
    async reload (trigger: ReloadTrigger = 'signal'): Promise<ReloadResult> {
      if (path === null) return { ok: true, tenants: current.tenants.size }
      const next = queue.then(async () => await reloadNow(path, trigger))
      queue = next
      return await next
    },
    status (): TenantsFileStatus {
      return { version: current.version, reloads: { ...reloads }, lastReloadOk }
    },
    close (): void {
      clearTimeout(timer)
      watcher?.close()
    }
  }

  if (path === null) return directory
  const changed = async (): Promise<void> => {
    let text: string
    try {
      text = await readTenantsFile(path, options.maxBytes ?? DEFAULT_TENANTS_FILE_MAX_BYTES)
    } catch {
      // Mid-swap, removed or too large: the reload reports what it finds.
      await directory.reload('watch')
      return
    }
    if (tenantsFileVersion(text) !== current.version) await directory.reload('watch')
  }
  try {
    watcher = watch(dirname(path), { persistent: false }, () => {
      clearTimeout(timer)
      timer = setTimeout(() => { void changed() }, WATCH_DEBOUNCE_MS)
    })
    watcher.on('error', (error) => {
      log.warn({ reason: error.message }, 'tenants file watch stopped; reload with SIGHUP')
      watcher?.close()
    })
  } catch (error) {
    log.warn({ reason: (error as Error).message }, 'tenants file cannot be watched; reload with SIGHUP')
  }
  return directory
}
