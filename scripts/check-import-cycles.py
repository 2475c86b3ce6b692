#!/usr/bin/env python3
"""No two source files of a crate import each other in a loop (issue 32): lists the strongly
connected components of each crate's file-level `crate::` / `super::` reference graph (grouped
`use crate::{..}` imports and root re-exports followed; comments and trailing test modules
ignored) and exits 1 if there is one. Run by scripts/test.sh before the tests."""
import os,re,sys
root=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates')
total=[]
def strip(text):
    text="\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
    i=text.find('#[cfg(test)]\nmod tests')
    return text[:i] if i>=0 else text
for crate in sorted(os.listdir(root)):
    src=os.path.join(root,crate,'src')
    if not os.path.isdir(src): continue
    files={}
    for dp,_,fs in os.walk(src):
        for f in fs:
            if f.endswith('.rs'):
                p=os.path.join(dp,f); rel=os.path.relpath(p,src)[:-3]
                mod=rel.replace('/','::')
                if mod.endswith('::mod'): mod=mod[:-5]
                if mod in ('lib','main'): mod=''
                files[mod]=p
    mods=set(files)
    reexp={}
    if '' in files:
        lib=strip(open(files[''])).read() if False else strip(open(files['']).read())
        for m,items in re.findall(r'pub use ([a-z_0-9:]+)::\{([^}]*)\}',lib):
            for it in items.split(','):
                it=it.strip().split(' as ')[-1].strip()
                if it: reexp[it]=m.split('::')[0]
        for m,it in re.findall(r'pub use ([a-z_0-9:]+)::([A-Za-z_0-9]+);',lib):
            reexp[it]=m.split('::')[0]
    edges={m:set() for m in mods}
    def add(m,path):
        parts=[x for x in path.split('::') if x]
        if not parts: return
        if parts[0] in reexp and parts[0] not in mods:
            t=reexp[parts[0]]
            if t in mods and t!=m and not m.startswith(t+'::'): edges[m].add(t)
            return
        best=None
        for k in range(len(parts),0,-1):
            c='::'.join(parts[:k])
            if c in mods: best=c;break
        if best and best!=m and not m.startswith(best+'::'): edges[m].add(best)
    for m,p in files.items():
        if m=='': continue
        text=strip(open(p).read())
        for grp in re.findall(r'crate::\{([^}]*)\}',text):
            for it in grp.split(','):
                add(m,it.strip().split(' as ')[0].replace('self',''))
        for u in re.findall(r'crate::([A-Za-z_0-9:]+)',text):
            add(m,u)
        for u in re.findall(r'super::([a-z_0-9]+)',text):
            parent='::'.join(m.split('::')[:-1]); c=(parent+'::'+u) if parent else u
            if c in mods and c!=m: edges[m].add(c)
    index={};low={};st=[];on=set();sccs=[];cnt=[0]
    sys.setrecursionlimit(10000)
    def sc(v):
        index[v]=low[v]=cnt[0];cnt[0]+=1;st.append(v);on.add(v)
        for w in edges[v]:
            if w not in index: sc(w);low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],index[w])
        if low[v]==index[v]:
            comp=[]
            while True:
                w=st.pop();on.discard(w);comp.append(w)
                if w==v:break
            if len(comp)>1: sccs.append(comp)
    for v in mods:
        if v not in index: sc(v)
    for c in sccs: total.append((crate,sorted(c)))
for c in total: print("import loop in %s: %s" % (c[0], " <-> ".join(c[1])))
sys.exit(1 if total else 0)
