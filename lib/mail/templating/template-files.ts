import { closeSync, constants, existsSync, fstatSync, lstatSync, openSync, readSync, realpathSync, statSync } from 'node:fs'
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path'
import { TemplateRuleError } from './liquid.js'

/**
 * The real path of `path`, following symbolic links; for a path that does not exist (yet),
 * the real path of its nearest existing ancestor with the rest appended.
 */
function realPath (path: string): string {
  const absolute = resolve(path)
  try {
    return realpathSync(absolute)
  } catch {
    const parent = dirname(absolute)
    return parent === absolute ? absolute : join(realPath(parent), basename(absolute))
  }
}

/** `inner` is `outer` or lies inside it. */
function within (outer: string, inner: string): boolean {
  const path = relative(outer, inner)
  return path === '' || (path !== '..' && !path.startsWith(`..${sep}`) && !isAbsolute(path))
}

/** The files a templates folder must not hold or overlap: the variable that names each, and its path. */
export interface GuardedFiles {
  /** The tenants file (TENANTS_FILE): it holds every tenant's secrets. */
  tenantsFile: string
  /** Other files the service reads (block lists), as `[variable, path]`. */
  others: ReadonlyArray<readonly [string, string]>
}

/** The block lists among IP_BLOCKLISTS and TOR_EXIT_LIST that are files (not URLs), as GuardedFiles' `others`. */
export function blockListFiles (ipSources: readonly string[], torSource: string | null): Array<readonly [string, string]> {
  const sources = [...ipSources.map((source) => ['IP_BLOCKLISTS', source] as const), ...(torSource === null ? [] : [['TOR_EXIT_LIST', torSource] as const])]
  return sources.filter(([, source]) => source !== '' && !/^[a-z][a-z0-9+.-]*:\/\//i.test(source))
}

/**
 * Why `root` cannot hold tenants' template files, or null when it can: it must not be, or
 * contain, the tenants file's folder, nor contain any other file the service reads. Compared
 * through real paths, so a symbolic link does not hide an overlap.
 */
export function templatesRootProblem (root: string, guarded: GuardedFiles): string | null {
  const realRoot = realPath(root)
  const tenantsFile = realPath(guarded.tenantsFile)
  for (const folder of new Set([dirname(resolve(guarded.tenantsFile)), dirname(tenantsFile)].map(realPath))) {
    if (within(realRoot, folder)) return `${realRoot} must not be or contain the tenants file's folder (${folder}): tenants' template files get a folder of their own`
  }
  for (const [variable, path] of guarded.others) {
    const real = realPath(path)
    if (within(realRoot, real)) return `${realRoot} must not contain ${real} (${variable}): it holds tenants' template files and nothing else`
  }
  return null
}

/** Opens without following a symbolic link, and without waiting for a writer should the file be a FIFO. */
const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0)

/** A tenant's template folder, from which its `{ "file": … }` templates are read. */
export interface TenantTemplateFolder {
  /** The folder, for messages. */
  readonly path: string
  /** The file's text; throws TemplateRuleError naming the rule the file breaks. */
  read: (file: string, maxBytes: number) => string
}

/**
 * Where tenants' template files live: `<root>/<tenant id>/`, a folder per tenant under a root
 * that holds nothing else the service reads (TEMPLATES_DIR; see templatesRootProblem). A tenant's
 * `{ "file": "fr.html.liquid" }` names a file inside its own folder and nowhere else: no absolute
 * path, no `..`, no symbolic link on the way, and a regular file with exactly one hard link (a
 * second link could be any file of the same file system, the tenants file included).
 */
export class TemplateFolders {
  readonly root: string
  /** The tenants file, to tell its authors where a file named the old way must go. */
  readonly #tenantsFile: string | null

  constructor (root: string, tenantsFile: string | null = null) {
    this.root = resolve(root)
    this.#tenantsFile = tenantsFile === null ? null : resolve(tenantsFile)
  }

  /** The default root: `templates/` beside the tenants file. */
  static besideTenantsFile (tenantsFile: string): string {
    return join(dirname(resolve(tenantsFile)), 'templates')
  }

  forTenant (tenantId: string): TenantTemplateFolder {
    const folder = join(this.root, tenantId)
    return { path: folder, read: (file, maxBytes) => this.#read(tenantId, folder, file, maxBytes) }
  }

  #read (tenantId: string, folder: string, file: string, maxBytes: number): string {
    const name = JSON.stringify(file)
    const where = `the tenant's template folder ${folder}${sep}`
    if (isAbsolute(file) || /^[\\/]|^[A-Za-z]:/.test(file)) throw new TemplateRuleError(`file ${name} must be a path inside ${where}, not an absolute path`)
    const segments = file.split(/[\\/]/)
    if (segments.includes('..')) throw new TemplateRuleError(`file ${name} leaves ${where}: a path may not contain ".."`)
    let realRoot: string
    try {
      realRoot = realpathSync(this.root)
    } catch {
      throw new TemplateRuleError(`file ${name} cannot be read: the templates folder ${this.root} (TEMPLATES_DIR) does not exist`)
    }
    const realFolder = join(realRoot, tenantId)
    // Each folder on the way, the tenant's own first, must be a real folder: a clear message
    // here; the check that holds against a race is the one after opening, below.
    let at = realFolder
    for (const segment of ['', ...segments.slice(0, -1)]) {
      at = join(at, segment)
      let stats
      try {
        stats = lstatSync(at)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw this.#missing(name, file, folder, where)
        throw new TemplateRuleError(`file ${name} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`)
      }
      const what = at === realFolder ? `the tenant's template folder ${folder}` : `folder ${JSON.stringify(relative(realFolder, at))} of ${where}`
      if (stats.isSymbolicLink()) throw new TemplateRuleError(`file ${name} cannot be read: ${what} is a symbolic link; template files are read only from real folders`)
      if (!stats.isDirectory()) throw new TemplateRuleError(`file ${name} cannot be read: ${what} is not a folder`)
    }
    const expected = join(realFolder, ...segments)
    let descriptor: number
    try {
      descriptor = openSync(expected, OPEN_FLAGS)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ELOOP') throw new TemplateRuleError(`file ${name} is a symbolic link; a template file must be a regular file inside ${where}`)
      if (code === 'ENOENT') throw this.#missing(name, file, folder, where)
      throw new TemplateRuleError(`file ${name} cannot be read: ${code ?? String(error)}`)
    }
    try {
      const stats = fstatSync(descriptor)
      if (!stats.isFile()) throw new TemplateRuleError(`file ${name} is not a regular file`)
      if (stats.nlink !== 1) throw new TemplateRuleError(`file ${name} has ${stats.nlink} hard links; a template file must have exactly one (another link could be any file on the same file system)`)
      // What was opened must be the file at the expected path, reached through no symbolic
      // link: the real path names it, and it is the same file (a folder swapped for a link
      // and back between the checks above and the open would show here).
      let real: string
      try {
        real = realpathSync(expected)
      } catch {
        real = ''
      }
      const there = real === expected ? statSync(real) : null
      if (there === null || there.dev !== stats.dev || there.ino !== stats.ino) {
        throw new TemplateRuleError(`file ${name} is reached through a symbolic link; template files are read only from real folders inside ${where}`)
      }
      if (stats.size > maxBytes) throw new TemplateRuleError(`file ${name} is larger than ${maxBytes} bytes`)
      // Read no more than the limit allows, whatever the size was when it was checked.
      const buffer = Buffer.alloc(maxBytes + 1)
      let length = 0
      for (let count = -1; count !== 0 && length <= maxBytes;) {
        count = readSync(descriptor, buffer, length, buffer.length - length, null)
        length += count
      }
      if (length > maxBytes) throw new TemplateRuleError(`file ${name} is larger than ${maxBytes} bytes`)
      return buffer.toString('utf8', 0, length)
    } finally {
      closeSync(descriptor)
    }
  }

  /** A file not in the tenant's folder; an old-layout file (beside the tenants file) is told where it must go now. */
  #missing (name: string, file: string, folder: string, where: string): TemplateRuleError {
    if (this.#tenantsFile !== null) {
      const beside = resolve(dirname(this.#tenantsFile), file)
      if (beside === this.#tenantsFile) {
        return new TemplateRuleError(`file ${name} names the tenants file: a template is read only from ${where}, never beside the tenants file`)
      }
      if (existsSync(beside)) {
        return new TemplateRuleError(`file ${name} is not in ${where}: template files are no longer read beside the tenants file; move ${beside} to ${join(folder, ...file.split(/[\\/]/))}`)
      }
    }
    return new TemplateRuleError(`file ${name} does not exist in ${where}`)
  }
}
